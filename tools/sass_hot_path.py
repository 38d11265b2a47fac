#!/usr/bin/env python3
"""Instructions a warp issues per step of a kernel's main loop, from its SASS.

Without a GPU, the machine code is what can be measured: this compiles a CUDA
source of forge (by default the tensor-core tree attention) for one
architecture, disassembles it and, for every kernel whose main loop holds
MMAs, walks the loop's hot path and counts what it issues.

  main loop  the smallest range closed by a backward branch that holds an MMA
             (HMMA, or HGMMA: wgmma) and a block barrier (BAR.SYNC): one step of the kernels'
             pipelined loops
  hot path   the path from the loop's head to its back edge with the most
             MMAs, then the most cp.async copies, then the fewest
             instructions: every tile seen and staged (the most MMAs and
             copies), no mask, no rescale, no fallback (the fewest).
             Branches out of the loop and back (cold blocks placed after it)
             are followed; an inner loop's body (a copy loop, a partly
             unrolled MMA loop) is counted once, and listed with its size.

Columns: the path's length, then instructions by kind; "never" counts those
predicated on !PT, which ptxas places before each cp.async on sm_90 (three
`@!PT LDS RZ, [RZ]`): in the path (they take issue slots), not in LDS.

The counts are static: latency, occupancy and memory are a GPU's to measure.
They say how much non-MMA work stands between a warp's MMAs, which is what a
latency-bound kernel with few resident warps pays for (docs/cuda.md).

Needs nvcc (the CUDA toolkit), cuobjdump and nvdisasm. The last two are not
in every toolkit install; PyPI has them (nvidia-cuda-cuobjdump,
nvidia-cuda-nvdisasm): --fetch installs them into ~/.cache/forge/cuda-binutils.

  tools/sass_hot_path.py                      # tree_attention_tc.cu, sm_90
  tools/sass_hot_path.py --filter 'fwd.*Bf16'
  tools/sass_hot_path.py --keep /tmp/new.o    # keep the object
  tools/sass_hot_path.py --baseline HEAD~1    # beside the same file at a revision
  tools/sass_hot_path.py --object /tmp/new.o --compare /tmp/old.o
"""
import argparse
import collections
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(os.environ.get("FORGE_CACHE") or os.path.expanduser("~/.cache/forge"), "cuda-binutils")
TOOLS = ("cuobjdump", "nvdisasm")


def fail(msg):
    print(f"sass_hot_path: {msg}", file=sys.stderr)
    sys.exit(2)


def binutils_dir(fetch):
    """A folder with cuobjdump and nvdisasm, or None where they are on PATH."""
    if all(shutil.which(t) for t in TOOLS):
        return None
    cached = os.path.join(CACHE, "nvidia", "cu13", "bin")
    if all(os.access(os.path.join(cached, t), os.X_OK) for t in TOOLS):
        return cached
    if not fetch:
        fail("cuobjdump and nvdisasm not found; --fetch installs them from PyPI "
             f"(nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into {CACHE}")
    print(f"installing cuobjdump and nvdisasm into {CACHE} ...", file=sys.stderr)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", CACHE,
                        "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"], capture_output=True, text=True)
    if r.returncode != 0 or not all(os.path.exists(os.path.join(cached, t)) for t in TOOLS):
        fail(f"pip could not install nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm into {CACHE}:\n"
             + r.stderr[-2000:])
    for t in TOOLS:
        os.chmod(os.path.join(cached, t), 0o755)
    return cached


def nvcc():
    """nvcc on PATH, or the toolkit's where tools/setup.sh finds it."""
    found = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)
    if not found:
        fail("nvcc not found (on PATH or /usr/local/cuda/bin): install the CUDA toolkit (docs/cuda.md)")
    return found


def cuda_includes(build):
    """forge_cuda's include flags: CMake's response file (Makefile generator), or
    a CUDA source's entry of compile_commands.json (any generator)."""
    rsp = os.path.join(build, "src", "CMakeFiles", "forge_cuda.dir", "includes_CUDA.rsp")
    if os.path.exists(rsp):
        return shlex.split(open(rsp).read())  # a build path with spaces is quoted there
    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        fail(f"neither {rsp} nor {db}: configure and build first (./forge.sh build), or pass --build")
    for entry in json.load(open(db)):
        if not re.search(r"src/backend/cuda/[^/]+\.cu$", entry["file"]):
            continue
        args = entry.get("arguments") or shlex.split(entry["command"])
        flags = []
        for i, a in enumerate(args):
            if a == "--options-file" and i + 1 < len(args):
                flags += shlex.split(open(os.path.join(entry["directory"], args[i + 1])).read())
            elif a in ("-I", "-isystem") and i + 1 < len(args):
                flags += [a, args[i + 1]]
            elif a.startswith("-I") or a.startswith("-isystem"):
                flags.append(a)
        return flags
    fail(f"{db} holds no CUDA source of forge_cuda: configure with the CUDA toolkit (docs/cuda.md)")


def compile_object(source, arch, build, out, tree=ROOT):
    """source (a path inside tree, a checkout of forge) compiled as the build compiles forge_cuda."""
    includes = cuda_includes(build)
    includes = [f"-I{os.path.join(tree, 'src')}" if x.startswith("-I") and x.endswith(os.sep + "src") else x
                for x in includes]
    cmd = [nvcc(), *includes, "-O3", "-DNDEBUG", f"--generate-code=arch=compute_{arch},code=[sm_{arch}]",
           "-std=c++20", "-x", "cu", "-c", source, "-o", out]
    print(f"compiling {os.path.relpath(source, tree)} of {tree} for sm_{arch} ...", file=sys.stderr)
    r = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    if r.returncode != 0:
        fail("nvcc failed:\n" + r.stderr[-4000:])


def compile_at_revision(rev, source, arch, build, out):
    """The same source at git revision rev (a temporary worktree), compiled into out."""
    rel = os.path.relpath(os.path.abspath(source), ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "tree")
        r = subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", tree, rev],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"--baseline {rev}: {r.stderr.strip()}")
        try:
            compile_object(os.path.join(tree, rel), arch, build, out, tree)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)


def disassemble(obj, tools):
    env = dict(os.environ)
    exe = "cuobjdump"
    if tools:
        env["PATH"] = tools + os.pathsep + env.get("PATH", "")
        exe = os.path.join(tools, "cuobjdump")
    r = subprocess.run([exe, "-sass", obj], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        fail("cuobjdump failed:\n" + r.stderr[-2000:])
    return r.stdout


def parse(sass):
    """{kernel name: [instruction dicts]}"""
    kernels = {}
    for chunk in sass.split("Function : ")[1:]:
        name = chunk.split("\n", 1)[0].strip()
        ins = []
        for line in chunk.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if not m:
                continue
            body = m.group(2).strip()
            predicated = re.match(r"^@!?U?P\w+\s+", body) is not None
            never = re.match(r"^@!U?PT\s+", body) is not None  # predicated on !true: issued, never executed
            body = re.sub(r"^@!?U?P\w+\s+", "", body)
            op = "(never)" if never else (body.split()[0] if body else "")
            target, cond = None, False
            if op.startswith("BRA"):
                t = re.findall(r"0x([0-9a-f]+)", body)
                target = int(t[-1], 16) if t else None
                cond = predicated or op != "BRA" or "," in body  # BRA.DIV, BRA P, target
            ins.append({"addr": int(m.group(1), 16), "op": op, "body": body, "target": target, "cond": cond})
        kernels[name] = ins
    return kernels


def short_name(name):
    """tree_attention_fwd_tc_kernel<Bf16Operands, 128, 2> from the mangled name."""
    m = re.search(r"tree_attention_([a-z]+)_tc_kernelI.*?(Tf32x3|Bf16)OperandsELi(\d+)ELi(\d+)", name)
    if m:
        return f"{m.group(1)} {m.group(2)} D<={m.group(3)} x{m.group(4)}"
    m = re.search(r"tree_attention_([a-z]+)_wgmma_kernelILi(\d+)E(?:Li(\d+)E)?(?:Li(\d+)E)?", name)
    if m:  # and its warpgroups a block, and the forward's keys a step where not 64
        keys = 32 * int(m.group(4)) if m.group(4) else 64
        return (f"{m.group(1)} wgmma D<={m.group(2)}" + (f" x{m.group(3)}" if m.group(3) else "") +
                (f" k{keys}" if keys != 64 else ""))
    m = re.search(r"_Z\w*?\d+(\w+?_kernel)", name)
    return m.group(1) if m else name[-50:]


def main_loop(ins):
    at = {x["addr"]: i for i, x in enumerate(ins)}
    best = None
    for i, x in enumerate(ins):
        t = x["target"]
        if t is None or t >= x["addr"] or t not in at:
            continue
        lo = at[t]
        body = ins[lo:i + 1]
        if any(y["op"].startswith(MMA) for y in body) and any(y["body"].startswith("BAR.SYNC") for y in body):
            if best is None or i - lo < best[1] - best[0]:
                best = (lo, i)
    return best


def hot_path(ins, lo, hi):
    """Indices of the path lo -> hi with the most HMMA, then LDGSTS, then the fewest instructions."""
    at = {x["addr"]: i for i, x in enumerate(ins)}

    def successors(i):
        x = ins[i]
        if x["op"].startswith("BRA"):
            out = []
            t = at.get(x["target"]) if x["target"] is not None else None
            inner_back = t is not None and lo <= i <= hi and lo <= t <= i
            if t is not None and not inner_back and t != lo:
                out.append(t)
            if x["cond"] and i + 1 < len(ins):
                out.append(i + 1)
            return out
        if x["op"] in ("EXIT", "RET"):
            return []
        return [i + 1] if i + 1 < len(ins) else []

    sys.setrecursionlimit(max(10000, 4 * len(ins)))
    best = {}  # i -> (hmma, ldgsts, -instructions, next)
    visiting = set()

    def walk(i):
        if i == hi:
            return (0, 0, -1, None)
        if i in best:
            return best[i]
        if i in visiting:
            return None
        visiting.add(i)
        h = 1 if ins[i]["op"].startswith(MMA) else 0
        c = 1 if ins[i]["op"].startswith("LDGSTS") else 0
        choice = None
        for t in successors(i):
            r = walk(t)
            if r is not None and (choice is None or (r[0] + h, r[1] + c, r[2] - 1) > choice[:3]):
                choice = (r[0] + h, r[1] + c, r[2] - 1, t)
        visiting.discard(i)
        best[i] = choice
        return choice

    if walk(lo) is None:
        return None
    path, i = [], lo
    while i is not None and i != hi:
        path.append(i)
        i = best[i][3]
    path.append(hi)
    return path


def inner_loops(ins, path):
    """(body length, HMMA in it, cp.async in it) of the inner loops on the path: backward branches
    within it to a point on it, the body without the step's barrier."""
    on = set(path)
    at = {x["addr"]: i for i, x in enumerate(ins)}
    out = []
    for i in path:
        x = ins[i]
        t = at.get(x["target"]) if x["target"] is not None else None
        if t is not None and t <= i and t in on and t != path[0]:
            body = ins[t:i + 1]
            if any(y["body"].startswith("BAR.SYNC") for y in body):
                continue
            out.append((len(body), sum(y["op"].startswith(MMA) for y in body),
                        sum(y["op"].startswith("LDGSTS") for y in body)))
    return out


MMA = ("HMMA", "HGMMA")  # mma.sync, wgmma (sm_90a)
GROUPS = [("HMMA", ("HMMA",)), ("HGMMA", ("HGMMA",)), ("LDSM", ("LDSM",)), ("LDS", ("LDS",)), ("MUFU", ("MUFU",)),
          ("FFMA", ("FFMA",)), ("FMUL", ("FMUL",)), ("FADD", ("FADD",)), ("FMNMX", ("FMNMX",)),
          ("FSETP", ("FSETP",)), ("F2FP", ("F2FP",)), ("cp.async", ("LDGSTS",)),
          ("int", ("IMAD", "IADD3", "VIADD", "LEA", "LOP3", "SHF", "ISETP", "MOV", "SEL", "PRMT", "IABS")),
          ("branch", ("BRA", "BSSY", "BSYNC")), ("local", ("STL", "LDL")), ("never", ("(never)",))]


def analyse(kernels, pattern):
    rows = {}
    for name, ins in kernels.items():
        label = short_name(name)
        if pattern and not re.search(pattern, label):
            continue
        loop = main_loop(ins)
        if loop is None:
            continue
        path = hot_path(ins, *loop)
        if path is None:
            continue
        ops = collections.Counter(ins[i]["op"].split(".")[0] for i in path)
        mix = {g: sum(ops[o] for o in members) for g, members in GROUPS}
        rows[label] = {"path": len(path), "mix": mix, "inner": inner_loops(ins, path)}
    return rows


def print_table(rows, base):
    cols = [g for g, _ in GROUPS]
    head = f"{'kernel':32s} {'path':>6s}" + ("  before" if base else "") + "".join(f" {c:>7s}" for c in cols)
    print(head)
    for label in sorted(rows):
        r = rows[label]
        line = f"{label:32s} {r['path']:6d}"
        if base:
            b = base.get(label)
            line += f" {b['path']:7d}" if b else f" {'-':>7s}"
        line += "".join(f" {r['mix'][c]:7d}" for c in cols)
        print(line)
        for body, hmma, copies in r["inner"]:
            print(f"{'':34s}inner loop counted once: {body} instructions ({hmma} HMMA, {copies} cp.async)"
                  " a further iteration")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--source", default=os.path.join(ROOT, "src", "backend", "cuda", "tree_attention_tc.cu"))
    ap.add_argument("--arch", default="90", help="SM architecture (default 90)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the CMake build folder (default build/)")
    ap.add_argument("--object", help="analyse this object file instead of compiling --source")
    ap.add_argument("--compare", help="a second object (an earlier build) to show beside, as 'before'")
    ap.add_argument("--baseline", help="compile --source at this git revision too and show it as 'before'")
    ap.add_argument("--keep", help="keep the compiled object at this path")
    ap.add_argument("--filter", help="only kernels whose short name matches this regular expression")
    ap.add_argument("--fetch", action="store_true", help="install cuobjdump and nvdisasm from PyPI where missing")
    a = ap.parse_args()
    if not re.fullmatch(r"\d{2,3}a?", a.arch):
        fail(f"--arch {a.arch!r}: expected an SM number such as 80 or 90")
    if a.filter:
        try:
            re.compile(a.filter)
        except re.error as e:
            fail(f"--filter {a.filter!r}: not a regular expression ({e})")
    if a.baseline and a.compare:
        fail("--baseline and --compare both name the 'before' object: give one")
    if a.keep and a.object:
        fail("--keep keeps the object compiled from --source; with --object nothing is compiled")
    if a.object is None and not os.path.isfile(a.source):
        fail(f"--source {a.source}: no such file")
    if a.baseline and subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "-q", a.baseline + "^{commit}"],
                                     capture_output=True).returncode != 0:
        fail(f"--baseline {a.baseline}: not a commit of this repository")
    tools = binutils_dir(a.fetch)
    with tempfile.TemporaryDirectory() as tmp:
        obj = a.object
        if obj is None:
            obj = a.keep or os.path.join(tmp, "kernels.o")
            compile_object(os.path.abspath(a.source), a.arch, a.build, obj)
        elif not os.path.exists(obj):
            fail(f"--object {obj}: no such file")
        rows = analyse(parse(disassemble(obj, tools)), a.filter)
        base = None
        if a.baseline:
            a.compare = os.path.join(tmp, "baseline.o")
            compile_at_revision(a.baseline, a.source, a.arch, a.build, a.compare)
        if a.compare:
            if not os.path.exists(a.compare):
                fail(f"--compare {a.compare}: no such file")
            base = analyse(parse(disassemble(a.compare, tools)), a.filter)
    if not rows:
        fail("no kernel with an MMA main loop matched")
    print_table(rows, base)


if __name__ == "__main__":
    main()
