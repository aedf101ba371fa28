#!/usr/bin/env python3
"""Reads stop33.patch's timing logs and prints where a request's time went,
for the opening burst (requests sent in the run's first 50 ms) and the rest.

    stop33_timing.py CLIENT_LOG [ROUTER_LOG]

CLIENT_LOG (PROTO_CLIENT, the load generator), one request a line:
    request-id start_unix_ns start->got_conn_us start->wrote_us
    start->first_response_byte_us ttft_us reused(0/1)
ROUTER_LOG (PROTO_TIMING, the router), one request a line:
    request-id entry_unix_ns entry->picked_us picked->try_us try->headers_us
    headers->first_body_byte_us first_body_byte->flushed_us flushed_unix_ns
    try->got_conn_us connect_us got_conn->wrote_us wrote->headers_us reused(0/1)
Both clocks are the machine's wall clock, so a request's two lines join on
its id (the load generator's X-Request-Id)."""
import statistics
import sys


def mean(xs):
    return statistics.mean(xs) if xs else float("nan")


def main():
    client = [l.split() for l in open(sys.argv[1])]
    client = [(c[0], int(c[1]), *map(int, c[2:7])) for c in client]
    client.sort(key=lambda c: c[1])
    t0 = client[0][1]
    router = {}
    if len(sys.argv) > 2:
        router = {l.split()[0]: list(map(int, l.split()[1:])) for l in open(sys.argv[2])}
    for name, part in (("burst", [c for c in client if c[1] - t0 < 50e6]),
                       ("rest", [c for c in client if c[1] - t0 >= 50e6])):
        print(f"{name}: {len(part)} requests, {sum(c[6] for c in part)} on pooled connections; client means, µs:"
              f" connection {mean([c[2] for c in part]):.0f}, written {mean([c[3] for c in part]):.0f},"
              f" response head {mean([c[4] for c in part]):.0f}, first token {mean([c[5] for c in part]):.0f}")
        joined = [(c, router[c[0]]) for c in part if c[0] in router]
        if joined:
            print(f"  router ({len(joined)} joined): client start to handler {mean([(r[0] - c[1]) / 1e3 for c, r in joined]):.0f},"
                  f" handler to upstream try {mean([r[1] + r[2] for c, r in joined]):.0f},"
                  f" upstream connection {mean([r[7] for c, r in joined]):.0f} (new ones: connect {mean([r[8] for c, r in joined if not r[11]]):.0f}),"
                  f" written {mean([r[9] for c, r in joined]):.0f}, engine's head {mean([r[10] for c, r in joined]):.0f},"
                  f" head to first token {mean([r[4] for c, r in joined]):.0f}, token to flushed {mean([r[5] for c, r in joined]):.0f},"
                  f" flushed to client {mean([(c[1] + c[5] * 1e3 - r[6]) / 1e3 for c, r in joined]):.0f}")


if __name__ == "__main__":
    main()
