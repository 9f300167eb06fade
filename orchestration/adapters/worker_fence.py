"""The fence of the processes that commit for a lease holder on other processes or hosts (the training workers):
each commit first looks at the lease object (`worker_fence`), and one whose lease was taken over commits nothing
(`LeaseTakenOver`). The holder's own fence is `lease.S3Lease.held`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from orchestration.adapters.lease import MISSING, bucket_key, error_code


class LeaseTakenOver(RuntimeError):
    """In a process working for a lease holder (a training worker): the lease is another's now; commit nothing."""


def worker_fence(lease: dict) -> Callable[[], None]:
    """A `core.fencing` check for a process that works for the holder of `lease` (`lease.held_lease`) on another
    process or host: LeaseTakenOver unless the lease object is still that holder's (one GET). The holder's own
    renewals change the object but not its holder and process, which a taker's differ in."""
    import boto3
    from botocore.exceptions import ClientError

    bucket, key = bucket_key(lease["location"])
    client = boto3.client("s3")  # this node's endpoint and credentials

    def check() -> None:
        try:
            current = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        except ClientError as exc:
            if error_code(exc) not in MISSING:
                raise
            current = None
        if not isinstance(current, dict) or (current.get("holder"), current.get("process")) != (
            lease["holder"],
            lease["process"],
        ):
            raise LeaseTakenOver(
                f"{lease['location']}: the lease of the command this process works for "
                f"({lease['holder']}) was taken over; it commits nothing more"
            )

    return check
