"""wt-server --config FILE (JSON) and --print-config: every option is a key,
the command line overrides the file, errors name the key and its line, and
--print-config's output is a config file that gives itself back."""

import json
import re
import subprocess

import wt_transfer as wt
from conftest import _server_bin


def run(*args):
    p = subprocess.run([_server_bin(), *args], capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout, p.stderr


def options():
    rc, out, _ = run("--help")
    assert rc == 0
    found = re.findall(r"^  --([a-z0-9-]+)( [A-Z]+)?", out, re.M)
    return {name: bool(value) for name, value in found if name != "help"}


def test_every_option_is_a_key(tmp_path):
    opts = options()
    assert {"listen", "model", "workers", "no-auth", "export", "log-format"} <= set(opts)
    f = tmp_path / "one.json"
    for name, takes_value in opts.items():
        if name in ("config", "print-config"):
            continue
        f.write_text(json.dumps({name: "1" if takes_value else True}))
        rc, out, err = run("--config", str(f), "--print-config")
        assert "unknown key" not in err, (name, err)
        if rc == 0:
            assert name in json.loads(out)


def test_file_then_command_line(start_server, tmp_path):
    f = tmp_path / "wt.json"
    f.write_text('{\n  "model": "synthetic:tiny",\n  "workers": 2,\n  "no-auth": true\n}\n')
    s = start_server("--config", str(f))
    with wt.Client(s.addr) as c:
        assert len(c.server_info()["workers"]) == 2
    s2 = start_server("--config", str(f), "--workers", "1")
    with wt.Client(s2.addr) as c:
        assert len(c.server_info()["workers"]) == 1
    # --print-config: what was set, as a config file that gives itself back
    rc, out, _ = run("--config", str(f), "--workers", "3", "--export-allow-uid",
                     "5", "--export-allow-uid", "6", "--print-config")
    assert rc == 0
    printed = json.loads(out)
    assert printed == {"model": "synthetic:tiny", "workers": "3", "no-auth": True,
                       "export-allow-uid": ["5", "6"]}
    g = tmp_path / "printed.json"
    g.write_text(out)
    rc, again, _ = run("--config", str(g), "--print-config")
    assert rc == 0 and json.loads(again) == printed


def test_errors_name_the_key_and_line(tmp_path):
    cases = [
        ('{\n  "model": "synthetic:tiny",\n  "wrokers": 2\n}\n',
         "line 3: key 'wrokers': unknown key"),
        ('{\n  "model": "synthetic:tiny",\n\n  "workers": "many"\n}\n',
         "line 4: key 'workers': --workers 'many' is not a number"),
        ('{"no-auth": "yes"}', "line 1: key 'no-auth': is a flag: true or false"),
        ('{"workers": {"n": 2}}', "key 'workers': expected a string or a number"),
        ('{"model": ', "line 1: "),
        ('[1, 2]', "not a JSON object"),
        ('{"config": "other.json"}', "key 'config': unknown key"),
    ]
    f = tmp_path / "bad.json"
    for text, needle in cases:
        f.write_text(text)
        rc, _, err = run("--config", str(f))
        assert rc == 2 and needle in err, (text, err)
    rc, _, err = run("--config", str(tmp_path / "missing.json"))
    assert rc == 2 and "missing.json" in err
