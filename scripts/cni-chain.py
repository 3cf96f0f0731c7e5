#!/usr/bin/env python3
"""Runs a CNI network configuration list the way a container runtime does (CNI spec 1.0.0,
"Section 4: Plugin Delegation / network configuration lists"), for the netns lab
(scripts/ferry-lab, docs/lab.md "On real CNI plugins").

  cni-chain.py ADD|DEL|CHECK --conflist FILE --netns PATH --containerid ID [--ifname eth0]
               [--args 'K=V;...'] [--cni-path DIR[:DIR...]] --cache FILE

For each plugin of the list, in order for ADD and CHECK and in reverse order for DEL, the
plugin's executable (found on CNI_PATH by its "type") runs with CNI_COMMAND, CNI_CONTAINERID,
CNI_NETNS, CNI_IFNAME, CNI_ARGS and CNI_PATH set and, on stdin, the plugin's own object with
the list's "name" and "cniVersion" added and, for every plugin after the first on ADD and for
every plugin on CHECK and DEL, "prevResult": the previous plugin's result (ADD) or the cached
result of the whole list (CHECK, DEL). A further plugin appended to the list (a chained one)
needs nothing here.

ADD prints the last plugin's result and caches it in --cache; DEL reads that cache, runs and
removes it (a missing cache or netns is no error: DEL must succeed for what is gone already).
A plugin that fails prints its error object (code, msg, details) to stderr and this exits 1;
a failed ADD first runs DEL for the whole list, as a runtime does, so nothing half-made stays.
"""
import argparse
import json
import os
import subprocess
import sys

# A plugin that does not answer in this time is stuck: the lab fails rather than hangs.
PLUGIN_TIMEOUT_S = 30


class ChainError(Exception):
    pass


def find_plugin(kind, cni_path):
    for d in cni_path.split(":"):
        exe = os.path.join(d, kind)
        if d and os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    raise ChainError(f"no CNI plugin '{kind}' on CNI_PATH {cni_path}")


def invoke(command, plugin, conflist, prev, opts):
    conf = dict(plugin)
    conf["name"] = conflist["name"]
    conf["cniVersion"] = conflist["cniVersion"]
    if prev is not None:
        conf["prevResult"] = prev
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": opts.containerid,
        "CNI_NETNS": opts.netns,
        "CNI_IFNAME": opts.ifname,
        "CNI_ARGS": opts.args,
        "CNI_PATH": opts.cni_path,
    }
    exe = find_plugin(plugin["type"], opts.cni_path)
    try:
        proc = subprocess.run([exe], input=json.dumps(conf).encode(), env=env,
                              capture_output=True, timeout=PLUGIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ChainError(f"{command} {plugin['type']}: no answer within {PLUGIN_TIMEOUT_S} s")
    if proc.returncode != 0:
        detail = proc.stdout.decode(errors="replace").strip() or "(no error object)"
        stderr = proc.stderr.decode(errors="replace").strip()
        raise ChainError(f"{command} {plugin['type']} exited {proc.returncode}: {detail}"
                         + (f"; stderr: {stderr}" if stderr else ""))
    out = proc.stdout.decode().strip()
    if command != "ADD":
        return None
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        raise ChainError(f"ADD {plugin['type']}: the result is not JSON ({e}): {out[:200]}")


def add(conflist, opts):
    prev = None
    for plugin in conflist["plugins"]:
        prev = invoke("ADD", plugin, conflist, prev, opts)
    tmp = opts.cache + ".tmp"
    with open(tmp, "w") as f:
        json.dump(prev, f)
    os.replace(tmp, opts.cache)
    return prev


def delete(conflist, opts, cached):
    errors = []
    for plugin in reversed(conflist["plugins"]):
        try:
            invoke("DEL", plugin, conflist, cached, opts)
        except ChainError as e:
            errors.append(str(e))   # the rest still run: DEL releases what it can
    if errors:
        raise ChainError("; ".join(errors))
    if os.path.exists(opts.cache):
        os.unlink(opts.cache)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["ADD", "DEL", "CHECK"])
    ap.add_argument("--conflist", required=True)
    ap.add_argument("--netns", required=True)
    ap.add_argument("--containerid", required=True)
    ap.add_argument("--ifname", default="eth0")
    ap.add_argument("--args", default="")
    ap.add_argument("--cni-path", default=os.environ.get("CNI_PATH", "/usr/lib/cni"))
    ap.add_argument("--cache", required=True)
    opts = ap.parse_args()
    with open(opts.conflist) as f:
        conflist = json.load(f)
    for key in ("name", "cniVersion", "plugins"):
        if key not in conflist:
            sys.exit(f"cni-chain: {opts.conflist} has no '{key}'")
    cached = None
    if opts.command != "ADD" and os.path.exists(opts.cache):
        with open(opts.cache) as f:
            cached = json.load(f)
    try:
        if opts.command == "ADD":
            try:
                print(json.dumps(add(conflist, opts)))
            except ChainError:
                try:
                    delete(conflist, opts, None)
                except ChainError as e:
                    print(f"cni-chain: DEL after the failed ADD: {e}", file=sys.stderr)
                raise
        elif opts.command == "CHECK":
            if cached is None:
                raise ChainError(f"CHECK: no cached result {opts.cache} (ADD first)")
            for plugin in conflist["plugins"]:
                invoke("CHECK", plugin, conflist, cached, opts)
        else:
            delete(conflist, opts, cached)
    except ChainError as e:
        print(f"cni-chain: {opts.containerid}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
