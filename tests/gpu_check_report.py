"""The RESULT lines scripts/gpu-check.sh collects into its table, for the
Python halves of the GPU check (gpu_check_torch.py, gpu_check_loader.py)."""

failed = 0


def result(name, value, target, status):
    """Prints RESULT|name|value|target|status; counts FAILs in `failed`."""
    global failed
    print(f"RESULT|{name}|{value}|{target}|{status}", flush=True)
    if status == "FAIL":
        failed += 1
