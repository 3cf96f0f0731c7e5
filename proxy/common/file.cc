#include "proxy/common/file.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ferry::common {

std::string errnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

namespace {

int64_t nanos(const timespec& ts) { return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec; }

// Closes the descriptor on every return path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

absl::StatusOr<std::string> readOpen(int fd, const std::string& path, const struct stat& st, size_t max_bytes) {
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is larger than ", max_bytes, " bytes"));
  }
  std::string out;
  // One allocation for the common case; the loop still handles a file that grows meanwhile.
  out.reserve(static_cast<size_t>(st.st_size));
  char buffer[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", errnoText(errno)));
    if (n == 0) return out;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is larger than ", max_bytes, " bytes"));
    }
  }
}

absl::Status openError(const std::string& path, int err) {
  std::string message = absl::StrCat("cannot open ", path, ": ", errnoText(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::UnavailableError(message);
}

}  // namespace

absl::StatusOr<std::string> readFile(const std::string& path, size_t max_bytes) {
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) return openError(path, errno);
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return absl::UnavailableError(absl::StrCat("cannot stat ", path, ": ", errnoText(errno)));
  return readOpen(fd.fd, path, st, max_bytes);
}

WatchedFile::WatchedFile(std::string path, size_t max_bytes) : path_(std::move(path)), max_bytes_(max_bytes) {}

void WatchedFile::reset() {
  stamp_ = Stamp{};
  racy_ = false;
  have_digest_ = false;
  failing_ = false;
}

WatchedFile::Result WatchedFile::fail(absl::Status status) {
  failing_ = true;
  error_ = std::move(status);
  return Result::kFailed;
}

WatchedFile::Result WatchedFile::poll() {
  Fd fd{::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  struct stat st {};
  Stamp now;
  if (fd.fd < 0) {
    now.error = errno;
  } else if (::fstat(fd.fd, &st) != 0) {
    now.error = errno;
  } else {
    now = Stamp{0,
                static_cast<uint64_t>(st.st_dev),
                static_cast<uint64_t>(st.st_ino),
                static_cast<int64_t>(st.st_size),
                nanos(st.st_mtim),
                nanos(st.st_ctim)};
  }
  if (now == stamp_ && !(racy_ && now.error == 0)) return Result::kUnchanged;
  // Remembered before reading: a broken version is reported once, not on every poll.
  stamp_ = now;
  racy_ = false;
  if (now.error != 0) return fail(openError(path_, now.error));

  auto text = readOpen(fd.fd, path_, st, max_bytes_);
  if (!text.ok()) return fail(text.status());
  int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  racy_ = wall - now.mtime_ns < kRacyWindowNs;
  failing_ = false;

  std::array<unsigned char, 32> digest{};
  unsigned int length = 0;
  if (EVP_Digest(text->data(), text->size(), digest.data(), &length, EVP_sha256(), nullptr) != 1) {
    // Without a digest every read counts as a change: a reload too many, never one missed.
    have_digest_ = false;
    content_ = *std::move(text);
    return Result::kChanged;
  }
  if (have_digest_ && digest == digest_) return Result::kUnchanged;
  have_digest_ = true;
  digest_ = digest;
  content_ = *std::move(text);
  return Result::kChanged;
}

absl::Status writeFileAtomic(const std::string& path, std::string_view content, mode_t mode) {
  unsigned char rnd[8];
  if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
    ERR_clear_error();
    return absl::InternalError(absl::StrCat("cannot write ", path, ": RAND_bytes failed"));
  }
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".");
  for (unsigned char b : rnd) absl::StrAppend(&tmp, static_cast<int>(b % 10));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", errnoText(errno)));
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot ", what, " ", tmp, ": ", errnoText(err)));
  };
  // The umask may have narrowed `mode`; a key file must end up exactly as asked.
  if (::fchmod(fd, mode) != 0) return fail("chmod");
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot close ", tmp, ": ", errnoText(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", errnoText(err)));
  }
  return absl::OkStatus();
}

}  // namespace ferry::common
