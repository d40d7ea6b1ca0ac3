"""Secrets fixture: reports whether it saw MB_SECRET_TOKEN (its hash, never its value).

With ``--token T`` it also prints T in the shapes milabench must redact.
"""

import argparse
import hashlib
import os
import time

from benchkit.channel import DataWriter

parser = argparse.ArgumentParser()
parser.add_argument("--token", default=None)
parser.add_argument("--sleep", type=float, default=1.0)
args = parser.parse_args()

writer = DataWriter()
value = os.environ.get("MB_SECRET_TOKEN")
writer.write(
    {
        "task": "train",
        "secret_sha": hashlib.sha256(value.encode()).hexdigest() if value else None,
        "over_ssh": "SSH_CONNECTION" in os.environ,
    }
)
if args.token:
    t = args.token
    print(f"cli --token {t} --token={t}", flush=True)
    print(f"cli --password {t} --password={t} --api-key {t} --secret={t}", flush=True)
    print(f"Authorization: Bearer {t}", flush=True)
    print(f"authorization: basic {t}", flush=True)
    print(f"fetching https://user:{t}@host/x", flush=True)
    import sys

    print(f"err --api-key={t} Authorization: Bearer {t}", file=sys.stderr, flush=True)
time.sleep(args.sleep)
for _ in range(3):
    writer.write({"task": "train", "rate": 10.0, "units": "items/s", "time": time.time()})
writer.close()
print("done", flush=True)
