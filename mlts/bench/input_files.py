"""A user's input folder (`--inputs DIR`): one `.npy` file per model input, or one per input and sample.

`<input>.npy` holds the input's value for every sample; `<input>_<k>.npy` (k = 0, 1, ...) its
value for sample k. In a file name every character of the input's name outside letters, digits,
`.`, `_` and `-` is written `_` (`encoder/state:0` -> `encoder_state_0.npy`). An input with indexed
files needs one for each of the samples 0..K-1, K being the same for every indexed input; an input
without a file is generated as usual. Files are read without pickles, at most MAX_FILE_BYTES each.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlts.errors import InputError
from mlts.hal import files

#: The largest .npy file read (bytes): 2 GiB, like an ONNX model.
MAX_FILE_BYTES = files.MAX_ONNX_BYTES
#: The most samples a folder may hold.
MAX_SAMPLES = 100_000

_INDEXED = re.compile(r"^(?P<stem>.+)_(?P<k>0|[1-9][0-9]*)$")


class InputFilesError(InputError):
    """A `--inputs` folder or file that cannot be used (one line naming it)."""


def file_stem(name: str) -> str:
    """The file name stem of input `name`: characters other than letters, digits, '.', '_', '-' become '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


@dataclass(frozen=True)
class InputFiles:
    """The arrays of a folder, by input name: one array (every sample) or one per sample."""

    folder: Path
    samples: int
    arrays: Mapping[str, tuple[np.ndarray, ...]]

    def value(self, name: str, sample: int) -> np.ndarray | None:
        """Input `name`'s array for `sample` (None: the folder has no file for it)."""
        arrays = self.arrays.get(name)
        if arrays is None:
            return None
        return arrays[0] if len(arrays) == 1 else arrays[sample]


def scan(folder: str | Path) -> dict[str, dict[int | None, Path]]:
    """{stem: {index or None: path}} of the folder's .npy files; InputFilesError for a bad folder."""
    root = Path(folder)
    if not root.is_dir():
        raise InputFilesError(f"--inputs {folder}: no such directory")
    found: dict[str, dict[int | None, Path]] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError as e:
        raise InputFilesError(f"--inputs {folder}: cannot list it: {e.strerror or e}") from None
    for path in entries:
        if path.suffix != ".npy":
            continue
        stem, index = path.stem, None
        m = _INDEXED.match(stem)
        if m is not None:
            stem, index = m.group("stem"), int(m.group("k"))
        found.setdefault(stem, {})[index] = path
    if not found:
        raise InputFilesError(f"--inputs {folder}: no .npy files (expected <input>.npy or <input>_<k>.npy)")
    return found


def match(
    found: Mapping[str, dict[int | None, Path]], names: Sequence[str]
) -> tuple[dict[str, dict[int | None, Path]], dict[str, str]]:
    """(the folder's files as this model reads them, {input name: stem} of its inputs that have files).

    A file `x_0.npy` is input `x_0` when the model has an input of that name, else sample 0 of `x`.
    """
    mine = {stem: dict(by_index) for stem, by_index in found.items()}
    stems = {file_stem(n): n for n in names}
    for stem, by_index in list(mine.items()):
        for k in [k for k in by_index if k is not None]:
            exact = f"{stem}_{k}"
            if exact in stems and exact not in mine:
                mine.setdefault(exact, {})[None] = by_index.pop(k)
    out = {stems[stem]: stem for stem, by_index in mine.items() if stem in stems and by_index}
    return mine, out


def read_array(path: Path) -> np.ndarray:
    """The array of one .npy file (no pickles); InputFilesError naming the file otherwise."""
    try:
        data = files.read_bytes(path, what="an input file", limit=MAX_FILE_BYTES)
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except OSError as e:
        raise InputFilesError(f"--inputs {path}: cannot read it: {e.strerror or e}") from None
    except (ValueError, EOFError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise InputFilesError(f"--inputs {path}: not a .npy array file ({reason})") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        raise InputFilesError(f"--inputs {path}: holds {getattr(array, 'dtype', type(array))} values; "
                              "expected numbers or booleans")  # fmt: skip
    return array


def fit_array(
    array: np.ndarray, path: Path, name: str, shape: tuple[int, ...], dtype: np.dtype
) -> np.ndarray:
    """`array` as input `name` takes it: `shape` (a missing leading 1 is added) and `dtype` (same kind of
    number, every value representable); InputFilesError naming the file otherwise."""
    if array.shape != shape and (1,) + array.shape == shape:
        array = array.reshape(shape)
    if array.shape != shape:
        raise InputFilesError(
            f"--inputs {path}: shape {list(array.shape)}, but input '{name}' takes {list(shape)}"
        )
    kind, want = array.dtype.kind, np.dtype(dtype)
    if want.kind == "f" and kind == "f":
        out = array.astype(want)
    elif want.kind in "iu" and kind in "iu":
        info = np.iinfo(want)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise InputFilesError(f"--inputs {path}: values beyond the {want} of input '{name}'")
        out = array.astype(want)
    elif want.kind == "b" and kind == "b":
        out = array
    else:
        raise InputFilesError(f"--inputs {path}: {array.dtype} values, but input '{name}' is {want}")
    if want.kind == "f" and not np.isfinite(out).all():
        raise InputFilesError(f"--inputs {path}: values that are not finite in {want} (input '{name}')")
    return np.ascontiguousarray(out)


def sample_count(found: Mapping[str, dict[int | None, Path]], stems: Mapping[str, str], folder: Path) -> int:
    """The number of samples the indexed files give (1 without any); InputFilesError for gaps."""
    counts = {}
    for name, stem in stems.items():
        indexes = sorted(k for k in found[stem] if k is not None)
        if None in found[stem] and indexes:
            raise InputFilesError(
                f"--inputs {folder}: input '{name}' has both {stem}.npy and indexed files; keep one form"
            )
        if indexes:
            if indexes != list(range(len(indexes))):
                missing = sorted(set(range(indexes[-1] + 1)) - set(indexes))
                raise InputFilesError(
                    f"--inputs {folder}: {stem}_{missing[0]}.npy is missing (input '{name}')"
                )
            counts[name] = len(indexes)
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"'{n}' {c}" for n, c in sorted(counts.items()))
        raise InputFilesError(f"--inputs {folder}: inputs have different numbers of samples ({listed})")
    count = next(iter(counts.values()), 1)
    if count > MAX_SAMPLES:
        raise InputFilesError(f"--inputs {folder}: {count} samples; at most {MAX_SAMPLES}")
    return count


def read_raw(
    folder: str | Path, found: Mapping[str, dict[int | None, Path]], stems: Mapping[str, str]
) -> tuple[int, dict[str, list[tuple[Path, np.ndarray]]]]:
    """(samples, {input name: [(path, array)]: one, or one per sample}) of the inputs in `stems`."""
    count = sample_count(found, stems, Path(folder))
    raw = {}
    for name, stem in stems.items():
        paths = [found[stem][None]] if None in found[stem] else [found[stem][k] for k in range(count)]
        raw[name] = [(p, read_array(p)) for p in paths]
    return count, raw


def fit_all(
    folder: str | Path,
    count: int,
    raw: Mapping[str, list[tuple[Path, np.ndarray]]],
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: Mapping[str, np.dtype],
) -> InputFiles:
    """The arrays of `read_raw`, each fitted to its input's final shape and dtype."""
    arrays = {
        name: tuple(fit_array(a, p, name, shapes[name], dtypes[name]) for p, a in pairs)
        for name, pairs in raw.items()
    }
    return InputFiles(Path(folder), count, arrays)
