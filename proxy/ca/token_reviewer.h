#pragma once
// Who sent a bearer token: the seam between ferry-ca's signing pipeline and the API server's
// TokenReview. Production asks the API server (apiTokenReviewer); tests and the benchmark
// answer from a table.
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "absl/status/statusor.h"
#include "proxy/ca/authorizer.h"
#include "proxy/k8s/client.h"

namespace ferry::ca {

class TokenReviewer {
 public:
  virtual ~TokenReviewer() = default;
  // Runs on the io thread and may suspend there, never block it. An error means the review
  // could not be made (the API server did not answer); a token that did not authenticate is
  // an answer (authenticated false).
  virtual boost::asio::awaitable<absl::StatusOr<TokenReview>> review(std::string token) = 0;
};

// The API server's answer as authorization reads it: the pod's name and UID only when the
// token names exactly one of each (a bound token does; anything else counts as unbound).
TokenReview fromApi(const k8s::TokenReviewStatus& status);

// TokenReviews through `client` (which must outlive the reviewer) for `audience`.
std::unique_ptr<TokenReviewer> apiTokenReviewer(k8s::ApiClient& client, std::string audience);

}  // namespace ferry::ca
