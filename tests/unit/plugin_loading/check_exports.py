#!/usr/bin/env python3
"""Every plugin in a folder exports lca_plugin_entry and nothing else (nm -D --defined-only).

A plugin that exports more can interpose on the libraries loaded beside it: with a toolchain that
links libstdc++ statically, the torch_sdpa plugins once exported their copy of it, LibTorch bound
std::locale's destructor to that copy and free() aborted (sdk/cmake/lcaPlugin.cmake).
Usage: check_exports.py NM PLUGIN_DIR
"""
import pathlib
import subprocess
import sys

ALLOWED = {"lca_plugin_entry"}


def main() -> int:
    nm, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    plugins = sorted(folder.glob("liblca_*.so"))
    if not plugins:
        print(f"no liblca_*.so in {folder}: build the plugins first")
        return 1
    bad = 0
    for so in plugins:
        out = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{so.name}: nm failed: {out.stderr.strip()}")
            bad += 1
            continue
        names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
        extra = [n for n in names if n not in ALLOWED]
        missing = ALLOWED - set(names)
        if extra or missing:
            bad += 1
            shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
            print(f"{so.name}: exports {len(extra)} symbols besides lca_plugin_entry ({shown})"
                  + (f"; missing {', '.join(sorted(missing))}" if missing else ""))
        else:
            print(f"{so.name}: ok")
    print(f"{len(plugins) - bad} of {len(plugins)} plugins export only lca_plugin_entry")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
