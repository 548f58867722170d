# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake: a C array of
# IN's bytes (const unsigned char NAME[]; const size_t NAME_len).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," arr "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n  " arr "${arr}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed.cmake. */\n#include <stddef.h>\n\nconst unsigned char ${NAME}[] = {\n  ${arr}0};\nconst size_t ${NAME}_len = ${len};\n")
