#include "proxy/identity/openssl_util.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <cstdio>
#include <ctime>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/file.h"
#include "proxy/identity/string_compat.h"

namespace ferry::identity {
namespace {

// Encrypted keys are not supported; without this callback OpenSSL would prompt on the tty.
int refusePassword(char*, int, int, void*) { return -1; }

BioPtr memBio(std::string_view data) {
  if (data.size() > static_cast<size_t>(std::numeric_limits<int>::max())) return nullptr;
  return BioPtr(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

}  // namespace

X509Ptr upRef(X509* cert) {
  if (cert != nullptr) X509_up_ref(cert);
  return X509Ptr(cert);
}

EvpPkeyPtr upRef(EVP_PKEY* key) {
  if (key != nullptr) EVP_PKEY_up_ref(key);
  return EvpPkeyPtr(key);
}

std::string drainOpenSslErrors() {
  std::string out;
  const char* data = nullptr;
  int flags = 0;
  while (unsigned long code = ERR_get_error_all(nullptr, nullptr, nullptr, &data, &flags)) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
    if ((flags & ERR_TXT_STRING) != 0 && data != nullptr && *data != '\0') {
      absl::StrAppend(&out, " (", data, ")");
    }
  }
  return out;
}

absl::Status openSslError(std::string_view what) {
  std::string errors = drainOpenSslErrors();
  if (errors.empty()) return absl::InternalError(toAbsl(what));
  return absl::InternalError(absl::StrCat(toAbsl(what), ": ", errors));
}

absl::StatusOr<std::vector<X509Ptr>> parseCertsPem(std::string_view pem) {
  ERR_clear_error();
  BioPtr bio = memBio(pem);
  if (!bio) return openSslError("cannot create memory BIO");
  std::vector<X509Ptr> certs;
  while (true) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, refusePassword, nullptr));
    if (cert) {
      certs.push_back(std::move(cert));
      continue;
    }
    unsigned long err = ERR_peek_last_error();
    if (ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE) {
      ERR_clear_error();  // the normal end of input
      break;
    }
    return openSslError(absl::StrCat("malformed certificate #", certs.size() + 1));
  }
  if (certs.empty()) return absl::InvalidArgumentError("no PEM certificate found");
  return certs;
}

absl::StatusOr<EvpPkeyPtr> parseKeyPem(std::string_view pem) {
  ERR_clear_error();
  BioPtr bio = memBio(pem);
  if (!bio) return openSslError("cannot create memory BIO");
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, refusePassword, nullptr));
  if (!key) {
    std::string errors = drainOpenSslErrors();
    return absl::InvalidArgumentError(
        absl::StrCat("no usable unencrypted PEM private key found: ", errors));
  }
  return key;
}

absl::StatusOr<std::vector<X509Ptr>> loadCertsPem(const std::string& path) {
  auto text = readFile(path);
  if (!text.ok()) return text.status();
  auto certs = parseCertsPem(*text);
  if (!certs.ok()) return absl::Status(certs.status().code(), absl::StrCat(path, ": ", certs.status().message()));
  return certs;
}

absl::StatusOr<EvpPkeyPtr> loadKeyPem(const std::string& path) {
  auto text = readFile(path);
  if (!text.ok()) return text.status();
  auto key = parseKeyPem(*text);
  if (!key.ok()) return absl::Status(key.status().code(), absl::StrCat(path, ": ", key.status().message()));
  return key;
}

absl::StatusOr<std::string> certToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return openSslError("cannot encode certificate as PEM");
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

absl::StatusOr<std::string> keyToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return openSslError("cannot encode private key as PEM");
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

absl::StatusOr<std::string> readFile(const std::string& path) {
  auto text = common::readFile(path, kMaxPemFileBytes);
  if (!text.ok() && absl::IsInvalidArgument(text.status()) &&
      absl::StrContains(text.status().message(), "is larger than")) {
    return absl::InvalidArgumentError(absl::StrCat(text.status().message(), "; not a PEM file"));
  }
  return text;
}

std::chrono::system_clock::time_point asn1TimeToTimePoint(const ASN1_TIME* t) {
  struct tm tm = {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    ERR_clear_error();
    return std::chrono::system_clock::time_point{};
  }
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

std::string formatTime(std::chrono::system_clock::time_point t) {
  time_t secs = std::chrono::system_clock::to_time_t(t);
  struct tm tm = {};
  gmtime_r(&secs, &tm);
  char buf[32];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

std::string nameToString(const X509_NAME* name) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || name == nullptr) return "";
  if (X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) {
    ERR_clear_error();
    return "";
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

}  // namespace ferry::identity
