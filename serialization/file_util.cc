#include "serialization/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dflow::serialization {
namespace {

std::string Errno() { return std::strerror(errno); }

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Makes a rename in `path`'s directory durable; best effort.
void SyncDirectoryOf(const std::string& path) {
  int dir = ::open(DirectoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

// Why `path` cannot be created, from open's errno, naming `path` and its folder.
Status CannotCreate(const std::string& path, int error) {
  const std::string dir = DirectoryOf(path);
  switch (error) {
    case ENOENT:
      return NotFound("cannot write '{}': the folder '{}' does not exist", path, dir);
    case ENOTDIR:
      return InvalidArgument("cannot write '{}': '{}' is not a folder", path, dir);
    case EISDIR:
      return InvalidArgument("cannot write '{}': it is a folder", path);
    case EACCES:
    case EPERM:
    case EROFS:
      return PermissionDenied("cannot write '{}': the folder '{}' is not writable ({})", path, dir,
                              std::strerror(error));
    default:
      return Internal("cannot write '{}': {}", path, std::strerror(error));
  }
}

}  // namespace

Status CheckWritable(const std::string& path) {
  if (path.empty()) return InvalidArgument("an empty file name");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return CannotCreate(path, EISDIR);
  const std::string dir = DirectoryOf(path);
  if (::stat(dir.c_str(), &st) != 0) return CannotCreate(path, errno);
  if (!S_ISDIR(st.st_mode)) return CannotCreate(path, ENOTDIR);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return CannotCreate(path, errno);
  return Status::OK();
}

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open '{}': {}", path, Errno());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("'{}' is not a regular file", path);
  }
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return InvalidArgument("'{}' is {} bytes, more than the {} bytes allowed", path, st.st_size,
                           max_bytes);
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? Errno() : "the file shrank while being read";
      ::close(fd);
      return InvalidArgument("reading '{}': {}", path, why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  const std::string_view pieces[] = {bytes};
  return WriteFileAtomically(path, pieces);
}

Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> pieces) {
  return WriteFileThrough(path + ".tmp." + std::to_string(::getpid()), path, pieces);
}

Status WriteFileThrough(const std::string& scratch, const std::string& path,
                        std::span<const std::string_view> pieces, bool sync) {
  // An existing scratch file is overwritten in place, not truncated first: its page-cache pages
  // and disk blocks are reused.
  int fd = ::open(scratch.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  // Named by the file the caller asked for, unless the scratch file lies elsewhere.
  if (fd < 0) {
    return CannotCreate(DirectoryOf(scratch) == DirectoryOf(path) ? path : scratch, errno);
  }
  auto fail = [&](const char* what) {
    std::string why = Errno();
    ::close(fd);
    ::unlink(scratch.c_str());
    return Internal("writing '{}': {} failed: {}", path, what, why);
  };
  struct stat st;
  if (::fstat(fd, &st) != 0) return fail("fstat");
  off_t size = 0;
  for (std::string_view bytes : pieces) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail("write");
      done += static_cast<size_t>(n);
    }
    size += static_cast<off_t>(bytes.size());
  }
  if (st.st_size > size && ::ftruncate(fd, size) != 0) return fail("ftruncate");
  // The data and what finds it (size, blocks); the rename below is made durable by the
  // directory's fsync.
  if (sync && ::fdatasync(fd) != 0) return fail("fdatasync");
  if (::close(fd) != 0) {
    std::string why = Errno();
    ::unlink(scratch.c_str());
    return Internal("writing '{}': close failed: {}", path, why);
  }
  if (::rename(scratch.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(scratch.c_str());
    if (error == EISDIR) return CannotCreate(path, error);  // `path` is a folder
    return Internal("cannot rename '{}' to '{}': {}", scratch, path, std::strerror(error));
  }
  if (sync) SyncDirectoryOf(path);
  return Status::OK();
}

Status SyncFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot sync '{}': {}", path, Errno());
  if (::fdatasync(fd) != 0) {
    std::string why = Errno();
    ::close(fd);
    return Internal("cannot sync '{}': {}", path, why);
  }
  ::close(fd);
  SyncDirectoryOf(path);
  return Status::OK();
}

}  // namespace dflow::serialization
