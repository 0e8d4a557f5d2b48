#!/usr/bin/python3
"""Compare the C CLI against the committed PyTorch golden cases.

    /usr/bin/python3 tests/golden/check_golden.py --difftrans build/difftrans --work /tmp/golden

For every case in tests/golden/cases/ it runs

    difftrans forward CASE --input CASE/ids.txt --output OUT.safetensors --grads

and compares `logits`, `loss` and every `grad.<name>` with CASE/expected.safetensors (the set of
grad tensors must equal the set of parameter tensors of the checkpoint); then the same without
--grads (logits and loss only). For a case with expected_hf_export.safetensors it also runs
`difftrans export CASE OUT --hf`, checks that the export has no subln tensors and no "difftrans"
config key, that o_proj holds the folded weights and every other tensor is unchanged, and that
`difftrans forward` on the export (and reference.py on it, when torch is there) gives the logits
of the original model.

When torch imports, all cases are regenerated into WORK/regen with make_golden.py and compared
with the committed files, so the committed goldens are known to come from the script.
Exit status: 0 when everything matches, 1 on any mismatch, 2 on a usage/setup error.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import numpy as np
except ImportError:
    print("check_golden.py needs numpy: run it with /usr/bin/python3 (Debian python3-numpy)", file=sys.stderr)
    sys.exit(2)

import reference as ref  # noqa: E402  (needs only numpy for safetensors; torch is optional)

# Tolerances (float32 C code against float32 PyTorch; the observed float32-vs-float64 error of
# the reference itself is <= 1e-5 of a tensor's scale on these cases).
LOGITS_RTOL = 1e-4      # max|a - e| <= LOGITS_RTOL * max(1, max|e|)   (logits and loss)
GRAD_RTOL = 2e-4        # max|a - e| <= GRAD_RTOL * max|e| + GRAD_ATOL (per grad tensor)
GRAD_ATOL = 1e-6
REGEN_RTOL = 1e-5       # regenerated vs committed expected outputs (same code, other machine)
# Gradients regenerated on another machine are held to grad_tol, as the C code is: PyTorch's float32
# reductions follow OpenBLAS's kernels, and the committed files (bit for bit with its Haswell
# kernels) differed from a regeneration with its Cooperlake or Prescott kernels by up to 1.7e-4 of
# a λ gradient's own size (diff_basic, layer 1: 7e-8 of 4e-4, a sum over every position that
# cancels) and by 3.3e-5 of it at most elsewhere (diff_rope_llama3), on an Intel Emerald Rapids,
# 2026-12-04; every logit and loss stayed within REGEN_RTOL.

# Config keys the HF export must keep (compared by effective value).
CONFIG_KEYS = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta",
               "tie_word_embeddings"]


class Checker:
    def __init__(self):
        self.failures = []

    def fail(self, case, msg):
        self.failures.append("%s: %s" % (case, msg))
        print("FAIL %s: %s" % (case, msg))

    def compare(self, case, what, got, exp, tol_fn, verbose=False):
        """Compare one tensor; tol_fn(expected) -> absolute tolerance. Returns True on a match."""
        got = np.asarray(got)
        exp = np.asarray(exp)
        if got.shape != exp.shape:
            self.fail(case, "%s: shape %s, expected %s" % (what, list(got.shape), list(exp.shape)))
            return False
        if exp.size == 0:
            return True
        if not np.all(np.isfinite(got)):
            bad = int(np.argmax(~np.isfinite(got.reshape(-1))))
            self.fail(case, "%s: non-finite value at flat index %d" % (what, bad))
            return False
        diff = np.abs(got.astype(np.float64) - exp.astype(np.float64))
        tol = tol_fn(exp)
        idx = np.unravel_index(int(np.argmax(diff)), exp.shape) if exp.shape else ()
        worst = float(diff[idx])
        line = "%s: worst |diff| %.3e at %s (got %.8g, expected %.8g), tol %.3e" % (
            what, worst, list(int(i) for i in idx), float(got[idx]), float(exp[idx]), tol)
        if worst > tol:
            self.fail(case, line)
            return False
        if verbose:
            print("     %s" % line)
        return True


def logits_tol(e):
    return LOGITS_RTOL * max(1.0, float(np.max(np.abs(e))))


def grad_tol(e):
    return GRAD_RTOL * float(np.max(np.abs(e))) + GRAD_ATOL


def run(cmd, case, chk, timeout=300):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except FileNotFoundError as e:
        chk.fail(case, "cannot run %s: %s" % (cmd[0], e))
        return False
    except subprocess.TimeoutExpired:
        chk.fail(case, "timed out after %ds: %s" % (timeout, " ".join(cmd)))
        return False
    if p.returncode != 0:
        chk.fail(case, "exit status %d from: %s\n  stdout: %s\n  stderr: %s" % (
            p.returncode, " ".join(cmd), p.stdout.decode(errors="replace").strip()[-2000:],
            p.stderr.decode(errors="replace").strip()[-2000:]))
        return False
    return True


def load_output(path, case, chk, what):
    try:
        out, dtypes = ref.load_safetensors(path, with_dtypes=True)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        chk.fail(case, "%s: cannot read %s: %s" % (what, path, e))
        return None
    bad = sorted(n for n, d in dtypes.items() if d != "F32")
    if bad:
        chk.fail(case, "%s: tensors not F32: %s" % (what, ", ".join("%s (%s)" % (n, dtypes[n]) for n in bad)))
    return out


def check_forward(exe, case_dir, work, chk, verbose):
    case = os.path.basename(case_dir)
    cfg, weights = ref.load_checkpoint(case_dir)
    exp = ref.load_safetensors(os.path.join(case_dir, "expected.safetensors"))
    ids = os.path.join(case_dir, "ids.txt")
    n_fail = len(chk.failures)

    # with --grads
    out_path = os.path.join(work, "forward_grads.safetensors")
    if run([exe, "forward", case_dir, "--input", ids, "--output", out_path, "--grads"], case, chk):
        got = load_output(out_path, case, chk, "forward --grads")
        if got is not None:
            for key in ("logits", "loss"):
                if key not in got:
                    chk.fail(case, "forward --grads output has no `%s` tensor" % key)
                else:
                    chk.compare(case, key, got[key], exp[key], logits_tol, verbose)
            want = {"grad." + n for n in weights}
            have = {n for n in got if n.startswith("grad.")}
            if want != have:
                chk.fail(case, "grad tensor set differs from the parameter set: missing %s; unexpected %s"
                         % (sorted(want - have) or "none", sorted(have - want) or "none"))
            for n in sorted(want & have):
                chk.compare(case, n, got[n], exp[n], grad_tol, verbose)
            other = sorted(set(got) - have - {"logits", "loss"})
            if other:
                chk.fail(case, "forward --grads output has unexpected tensors %s" % other)

    # without --grads: logits and loss only
    out_path = os.path.join(work, "forward.safetensors")
    if run([exe, "forward", case_dir, "--input", ids, "--output", out_path], case, chk):
        got = load_output(out_path, case, chk, "forward")
        if got is not None:
            for key in ("logits", "loss"):
                if key not in got:
                    chk.fail(case, "forward output has no `%s` tensor" % key)
                else:
                    chk.compare(case, key + " (no --grads)", got[key], exp[key], logits_tol, verbose)
            extra = sorted(set(got) - {"logits", "loss"})
            if extra:
                chk.fail(case, "forward without --grads wrote extra tensors %s" % extra[:5])
    return len(chk.failures) == n_fail


def check_hf_export(exe, case_dir, work, chk, verbose):
    case = os.path.basename(case_dir)
    n_fail = len(chk.failures)
    cfg, weights = ref.load_checkpoint(case_dir)
    exp = ref.load_safetensors(os.path.join(case_dir, "expected.safetensors"))
    hexp = ref.load_safetensors(os.path.join(case_dir, "expected_hf_export.safetensors"))
    ids = os.path.join(case_dir, "ids.txt")
    out_dir = os.path.join(work, "hf_export")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    if not run([exe, "export", case_dir, out_dir, "--hf"], case, chk):
        return False
    try:
        hcfg, hw = ref.load_checkpoint(out_dir)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        chk.fail(case, "export --hf: cannot read the exported checkpoint: %s" % e)
        return False
    if "difftrans" in hcfg:
        chk.fail(case, "export --hf: config.json still has the \"difftrans\" key")
    subln = sorted(n for n in hw if "subln" in n)
    if subln:
        chk.fail(case, "export --hf: model.safetensors still has %s" % subln)
    for k in CONFIG_KEYS + ["head_dim"]:
        a = ref.head_dim_of(cfg) if k == "head_dim" else cfg.get(k)
        b = ref.head_dim_of(hcfg) if k == "head_dim" else hcfg.get(k)
        if a != b:
            chk.fail(case, "export --hf: config %s = %r, original %r" % (k, b, a))
    folded_cfg = dict(cfg)
    folded_cfg.pop("difftrans", None)
    want = set(ref.param_names(folded_cfg))
    if set(hw) != want:
        chk.fail(case, "export --hf: tensor set differs: missing %s; unexpected %s"
                 % (sorted(want - set(hw)) or "none", sorted(set(hw) - want) or "none"))
    for n in sorted(want & set(hw)):
        key = "weight." + n
        if key in hexp:
            chk.compare(case, "export " + n, hw[n], hexp[key],
                        lambda e: 1e-6 * float(np.max(np.abs(e))), verbose)
        elif not (hw[n].shape == weights[n].shape and np.array_equal(hw[n], weights[n])):
            chk.fail(case, "export --hf: %s changed (it should be copied unchanged)" % n)

    out_path = os.path.join(work, "forward_hf_export.safetensors")
    if run([exe, "forward", out_dir, "--input", ids, "--output", out_path], case, chk):
        got = load_output(out_path, case, chk, "forward on the export")
        if got is not None and "logits" in got:
            chk.compare(case, "export logits vs expected_hf_export", got["logits"], hexp["logits"], logits_tol, verbose)
            chk.compare(case, "export logits vs original model", got["logits"], exp["logits"], logits_tol, verbose)
        elif got is not None:
            chk.fail(case, "forward on the export wrote no `logits`")
    if ref.torch is not None and not subln and set(hw) == want:
        r = ref.run_reference(hcfg, hw, ref.read_ids(ids), grads=False)
        chk.compare(case, "reference.py on the export vs original model", r["logits"], exp["logits"], logits_tol, verbose)
    return len(chk.failures) == n_fail


def check_regen(cases_dir, work, chk):
    """Regenerate every case with make_golden.py and compare with the committed files."""
    regen = os.path.join(work, "regen")
    if os.path.isdir(regen):
        shutil.rmtree(regen)
    cmd = [sys.executable, os.path.join(HERE, "make_golden.py"), "--out", regen, "--quiet"]
    if not run(cmd, "regen", chk, timeout=600):
        return
    committed = sorted(d for d in os.listdir(cases_dir) if os.path.isdir(os.path.join(cases_dir, d)))
    made = sorted(d for d in os.listdir(regen) if os.path.isdir(os.path.join(regen, d)))
    if committed != made:
        chk.fail("regen", "case list differs: committed %s, make_golden.py %s" % (committed, made))
    bit_exact = True
    for case in sorted(set(committed) & set(made)):
        a_dir, b_dir = os.path.join(cases_dir, case), os.path.join(regen, case)
        fa, fb = sorted(os.listdir(a_dir)), sorted(os.listdir(b_dir))
        if fa != fb:
            chk.fail("regen", "%s: files differ: committed %s, regenerated %s" % (case, fa, fb))
        for fn in sorted(set(fa) & set(fb)):
            pa, pb = os.path.join(a_dir, fn), os.path.join(b_dir, fn)
            with open(pa, "rb") as f:
                da = f.read()
            with open(pb, "rb") as f:
                db = f.read()
            if da == db:
                continue
            if not fn.startswith("expected"):
                chk.fail("regen", "%s/%s differs from what make_golden.py writes" % (case, fn))
                continue
            bit_exact = False
            ta, tb = ref.load_safetensors(pa), ref.load_safetensors(pb)
            if set(ta) != set(tb):
                chk.fail("regen", "%s/%s: tensor names differ" % (case, fn))
                continue
            for n in sorted(ta):
                tol = grad_tol if n.startswith("grad.") else \
                    (lambda e: REGEN_RTOL * max(1e-3, float(np.max(np.abs(e))) if e.size else 0.0))
                chk.compare("regen", "%s/%s %s" % (case, fn, n), ta[n], tb[n], tol)
    if not any(f.startswith("regen") for f in chk.failures):
        print("ok   regen: make_golden.py reproduces all %d committed cases (%s)"
              % (len(committed), "bit-exact" if bit_exact else
                 "within %.0e, gradients within %.0e + %.0e" % (REGEN_RTOL, GRAD_RTOL, GRAD_ATOL)))


def main():
    ap = argparse.ArgumentParser(description="Compare `difftrans forward`/`export` with the PyTorch golden cases.")
    ap.add_argument("--difftrans", required=True, help="path to the difftrans CLI")
    ap.add_argument("--work", required=True, help="scratch directory (created; outputs are left there)")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases"), help="case root (default: tests/golden/cases)")
    ap.add_argument("--only", action="append", default=[], help="check only this case (repeatable)")
    ap.add_argument("--no-regen", action="store_true", help="skip regenerating the cases with make_golden.py")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the worst element of every tensor")
    args = ap.parse_args()

    exe = os.path.abspath(args.difftrans)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        print("FAIL: %s is not an executable file" % args.difftrans, file=sys.stderr)
        return 2
    if not os.path.isdir(args.cases):
        print("FAIL: no case directory %s" % args.cases, file=sys.stderr)
        return 2
    cases = sorted(d for d in os.listdir(args.cases)
                   if os.path.isfile(os.path.join(args.cases, d, "expected.safetensors")))
    if args.only:
        unknown = sorted(set(args.only) - set(cases))
        if unknown:
            print("FAIL: unknown case(s) %s; have %s" % (unknown, cases), file=sys.stderr)
            return 2
        cases = [c for c in cases if c in args.only]
    if not cases:
        print("FAIL: no golden cases under %s" % args.cases, file=sys.stderr)
        return 2
    os.makedirs(args.work, exist_ok=True)

    chk = Checker()
    for case in cases:
        case_dir = os.path.join(args.cases, case)
        work = os.path.join(args.work, case)
        os.makedirs(work, exist_ok=True)
        try:
            ok = check_forward(exe, case_dir, work, chk, args.verbose)
            if ok:
                print("ok   %s: forward logits, loss and %d grads match"
                      % (case, len(ref.load_safetensors(os.path.join(case_dir, "model.safetensors")))))
            if os.path.isfile(os.path.join(case_dir, "expected_hf_export.safetensors")):
                if check_hf_export(exe, case_dir, work, chk, args.verbose):
                    print("ok   %s: export --hf folds subln and keeps the logits" % case)
        except Exception as e:  # a broken case must not hide the others
            chk.fail(case, "checker error: %s: %s" % (type(e).__name__, e))

    if args.no_regen:
        print("regeneration skipped (--no-regen)")
    elif ref.torch is None:
        print("torch not installed: comparing against committed goldens only")
    else:
        check_regen(args.cases, args.work, chk)

    if chk.failures:
        print("\n%d mismatch(es):" % len(chk.failures))
        for f in chk.failures:
            print("  " + f.split("\n")[0])
        return 1
    print("all %d golden cases passed" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
