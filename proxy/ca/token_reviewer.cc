#include "proxy/ca/token_reviewer.h"

namespace ferry::ca {
namespace asio = boost::asio;

namespace {

class ApiTokenReviewer : public TokenReviewer {
 public:
  ApiTokenReviewer(k8s::ApiClient& client, std::string audience) : client_(client), audience_(std::move(audience)) {}
  asio::awaitable<absl::StatusOr<TokenReview>> review(std::string token) override {
    std::vector<std::string> audiences = {audience_};
    auto status = co_await client_.reviewToken(std::move(token), std::move(audiences));
    if (!status.ok()) co_return status.status();
    co_return fromApi(*status);
  }

 private:
  k8s::ApiClient& client_;
  const std::string audience_;
};

}  // namespace

TokenReview fromApi(const k8s::TokenReviewStatus& status) {
  TokenReview out;
  out.authenticated = status.authenticated;
  out.error = status.error;
  out.username = status.username;
  out.uid = status.uid;
  out.audiences = status.audiences;
  if (status.pod_names.size() == 1 && status.pod_uids.size() == 1) {
    out.pod_name = status.pod_names[0];
    out.pod_uid = status.pod_uids[0];
  }
  return out;
}

std::unique_ptr<TokenReviewer> apiTokenReviewer(k8s::ApiClient& client, std::string audience) {
  return std::make_unique<ApiTokenReviewer>(client, std::move(audience));
}

}  // namespace ferry::ca
