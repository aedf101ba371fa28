"""List the internal addresses of a dstack run's running replicas.

Used by prefixring.dstack.yml (setup B): `--out FILE` writes
http://IP:PORT lines for prefixring's --endpoints-file (atomically, so the
router never reads half a file); `--peers` prints IP:PORT,... of the other
replicas of a run, for --join. Runs inside a dstack run with `dstack: true`
and DSTACK_TOKEN set (dstack's Python API reads the server and project).
"""

import argparse
import os
import socket
import sys
import tempfile
import time

from dstack.api import Client


def running_ips(client, run_name):
    run = client.runs.get(run_name)
    if run is None:
        return []
    ips = []
    for job in run._run.jobs:
        sub = job.job_submissions[-1] if job.job_submissions else None
        jpd = sub.job_provisioning_data if sub else None
        if sub is not None and sub.status.value == "running" and jpd and jpd.internal_ip:
            ips.append(jpd.internal_ip)
    return sorted(set(ips))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out")
    p.add_argument("--peers", action="store_true")
    p.add_argument("--wait", action="store_true", help="retry until the run has a running replica")
    a = p.parse_args()
    client = Client.from_config()
    while True:
        ips = running_ips(client, a.run)
        if ips or not a.wait:
            break
        time.sleep(5)
    if a.peers:
        me = socket.gethostbyname(socket.gethostname())
        print(",".join(f"{ip}:{a.port}" for ip in ips if ip != me))
        return
    if not ips:
        sys.exit(f"run {a.run} has no running replica; {a.out} left as it was")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(a.out) or ".")
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"http://{ip}:{a.port}\n" for ip in ips))
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
