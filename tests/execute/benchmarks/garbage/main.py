"""Fault fixture: writes garbage to the data channel between valid records."""

import os

fd = int(os.environ["DATA_FD"])
chunks = [
    b'{"task": "train", "rate": 1.5, "units": "items/s"}\n',
    b"this is not json\n",
    b'{"task": "train", "rate": \n',
    b"\xff\xfe\x00binary\x80\n",
    b"[1, 2, 3]\n",
    b'{"$event": "end", "$data": {"return_code": 0}}\n',
    b'{"task": "train", "rate": 2.5, "units": "items/s"}\n',
    b'{"task": "train", "rate": NaN}\n',
    b"no newline at the end",
]
for chunk in chunks:
    os.write(fd, chunk)
print("done writing garbage")
