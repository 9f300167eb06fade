"""Where a run writes its dataset before committing it, and the commit: a rename or a manifest.

A local directory (`run/data`, no scheme) is published by renaming: the run
writes a sibling `.data.partial-<fingerprint>` and swaps it into place when
complete (`core.output.OutputFolder.commit`). The layout is flat (`data/spm.model`,
`data/train/part-...`), which the training code reads directly.

A URI (`s3://`, `gs://`, `hdfs://`, `file://`) is committed by its manifest,
because object stores cannot rename a directory:

1. every file of the run goes under a fresh prefix `<data_dir>/attempt-<fp>-<time>-<id>/`
   (a new one per run, so a rerun never touches the files of the dataset in use);
2. the manifest, written last as `<data_dir>/manifest.json`, names those files by
   their paths relative to `<data_dir>`; writing it is the commit. Readers
   (`dataset.load_manifest`, `split_files`, `read_split`) trust only the manifest,
   so an unfinished prefix is never read, and the previous manifest with its
   files stays the dataset until the new manifest replaces it;
3. only then are the other `attempt-*` prefixes deleted: the previous dataset's and
   those of crashed runs, each holding the staging marker (`ownership.STAGING_MARKER`)
   that says the product made it; nothing else under the location is touched.

The manifest replaces the previous one atomically: on a filesystem that renames
(local, HDFS) it is written beside and moved over; on an object store it is one
PUT, which readers see whole or not at all.

Tested: the local filesystem through `pyarrow.fs` (`file://` URIs), the same
calls that serve the other schemes. Untested: real object stores and HDFS,
in particular S3/GCS credentials and consistency, HDFS's rename (which may
refuse to replace an existing manifest), and the cost of pyarrow resolving the
filesystem for every file. One writer per dataset location at a time: a
commit deletes every other attempt prefix, a concurrent run's included; a
reader still on the previous manifest loses its files then (as with the
rename). Consumers follow the manifest's paths (`manifest.spm.model`
is `attempt-.../spm.model` here), not `<data_dir>/spm.model`.
"""

from __future__ import annotations

from core import dataset
from core.location import Location, Where
from core.output import Staging

ATTEMPT = dataset.ATTEMPT


def refuse_other_config(
    data_dir: Where, old: dataset.DatasetManifest | None, name: str | None, fingerprint: str, force: bool
) -> None:
    """DatasetError if `data_dir` holds the dataset (`old`) of another config (by its `name`), unless `force`: a
    shared `dataset_dir` is never replaced under another config's models without being asked."""
    owner = old.config_name if old is not None else None
    if old is not None and not force and name and owner and owner != name and old.fingerprint != fingerprint:
        raise dataset.DatasetError(
            f"{data_dir} holds the dataset of config {owner!r} (fingerprint {old.fingerprint[:12]}), "
            f"not this one of {name!r} (fingerprint {fingerprint[:12]}); replacing it would strand {owner!r}'s "
            "models: give this config its own dataset_dir, or pass --force to replace it"
        )


def check_staged(staging: Staging, data_dir: Where, manifest: dataset.DatasetManifest) -> None:
    """Before the commit: DatasetError if a file the manifest names is missing or of another size (in a store,
    where the files are in place already; a local staging folder is swapped in whole)."""
    if staging.prefix:
        _check_members(Location.of(data_dir), manifest)


def _check_members(data_dir: Location, manifest: dataset.DatasetManifest) -> None:
    for split in manifest.splits.values():
        for f in split.files:
            location = data_dir.join(f.path)
            if not location.exists() or location.size() != f.bytes:
                raise dataset.DatasetError(
                    f"{location}: missing or not {f.bytes} bytes as its manifest says; "
                    "nothing was committed: run `interlingua prepare --force` again"
                )
    if not data_dir.join(manifest.spm.model).exists():
        raise dataset.DatasetError(f"{data_dir}: {manifest.spm.model} is missing; nothing was committed")
