// Whole-file reads and atomic writes, with errors that name the file.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace dflow::serialization {

// FlatBuffers cannot address more than 2 GiB.
inline constexpr size_t kMaxFileBytes = size_t{2} << 30;

// The file's bytes. NotFound when it cannot be opened; InvalidArgument when it is larger than
// `max_bytes` (nothing is read then).
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = kMaxFileBytes);

// Writes `bytes` to `path` so that a reader sees the old file or the new one, never a part:
// a temporary file in the same directory, fsync, rename over `path`, fsync of the directory.
// On error the temporary file is removed and `path` is untouched.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

// The same for a file made of `pieces` in order, each written from where it lies (no copy into
// one buffer first).
Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> pieces);

// The same through `scratch`, a file in `path`'s directory that only this writer uses and that
// readers never look at: it is created when missing and otherwise overwritten in place (its
// pages and disk blocks reused, where a new file costs the kernel an allocation now and a
// release when it is removed: a third of the CPU time for 2.7 MB here), synced and renamed to
// `path`. On error `scratch` is removed and `path` is untouched; on success `scratch` is gone.
// With `sync` false the file and the rename are not synced to the disk: other processes see the
// new file whole at once (a killed writer leaves the old one), but a crash of the machine may
// leave `path` holding old and new blocks mixed.
Status WriteFileThrough(const std::string& scratch, const std::string& path,
                        std::span<const std::string_view> pieces, bool sync = true);

// Whether a file can be written at `path` (WriteFileAtomically's way), checked before long work
// whose result goes there: NotFound when its folder does not exist, InvalidArgument when the
// folder is not one or `path` is a folder, PermissionDenied when the folder is not writable;
// each names the path and the folder. Writes nothing.
Status CheckWritable(const std::string& path);

// Syncs `path`'s data and its directory entry to the disk (a file written with `sync` false).
Status SyncFile(const std::string& path);

}  // namespace dflow::serialization
