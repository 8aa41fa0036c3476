"""The untrusted side of the coding sandbox: runs the program and answers calls with data, nothing more.

Run as ``python -I -S sandbox_runner.py REQUEST_FD RESPONSE_FD`` with the job (program, entry point,
working directory, limits) on stdin. It confines itself (limits, the audit guard; bubblewrap around it
where the machine has it), runs the program, says ``{"ready": true}`` (or ``{"error": ...}``), then
answers each ``{"call": name, "args": ..., "kwargs": ...}`` from the judge with ``{"return": value}``,
``{"raise": [exception class names], "message": ...}`` or ``{"error": ...}`` (an answer that is not
plain data). Nothing here decides a verdict, so nothing the program does to this process can fake one:
it never sees the tests or the expected answers, only the arguments it is called with.
"""
import builtins
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sandbox_child as child  # noqa: E402  (a sibling file: -I leaves the script's directory off the path)


def describe(exc):
    try:
        return f"{type(exc).__name__}: {exc}"[:500]
    except BaseException:
        return type(exc).__name__


def answer(function, request):
    """The response to one call request."""
    try:
        args = child.decode(request["args"])
        kwargs = child.decode(request["kwargs"])
        if type(args) is not tuple or type(kwargs) is not dict:
            raise child.NotPlain("malformed call")
    except (child.NotPlain, KeyError, TypeError) as exc:
        return {"error": f"malformed call request: {exc}"}
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:   # SystemExit too: the candidate's answer is "it raised"
        try:
            names = [str(klass.__name__) for klass in type(exc).__mro__][:50]
        except BaseException:
            names = ["Exception"]
        try:
            message = str(exc)[:500]
        except BaseException:
            message = ""
        return {"raise": names, "message": message}
    try:
        return {"return": child.encode(value)}
    except child.NotPlain as exc:
        return {"error": f"{request.get('call')} returned {exc}"[:1000]}
    except RecursionError:
        return {"error": f"{request.get('call')} returned a value nested too deeply"}


def main():
    request_fd, response_fd = int(sys.argv[1]), int(sys.argv[2])
    job = json.loads(sys.stdin.buffer.read())
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    requests = os.fdopen(request_fd, "rb")
    child.preload()
    child.confine(job["workdir"], job["limits"])
    if job["guard"]:
        child.install_guard(job["workdir"])

    def respond(message):
        child.write_message(response_fd, message)

    namespace = {"__name__": "__candidate__", "__builtins__": builtins}
    try:
        exec(compile(job["program"], "program.py", "exec"), namespace)
        if not callable(namespace.get(job["entry_point"])):
            raise NameError(f"the program defines no function {job['entry_point']}")
    except BaseException as exc:
        respond({"error": f"the program failed to load: {describe(exc)}"})
        os._exit(1)
    respond({"ready": True})
    while True:
        try:
            request = child.read_message(requests)
        except ValueError:
            os._exit(1)
        if request is None:
            os._exit(0)
        function = namespace.get(request.get("call")) if type(request.get("call")) is str else None
        if not callable(function):
            respond({"error": f"the program defines no function {str(request.get('call'))[:100]}"})
            continue
        respond(answer(function, request))


if __name__ == "__main__":
    main()
