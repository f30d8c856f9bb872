"""Run one function in several threads at once and re-raise the first error a thread
raised in the main thread (a failing assert in a thread would otherwise only print)."""
import threading


def run_threads(n, target):
    errors = []

    def wrapped(i):
        try:
            target(i)
        except BaseException as e:   # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
