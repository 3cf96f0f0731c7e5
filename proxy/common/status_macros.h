#pragma once
// The two helpers of absl::Status plumbing on the control plane (style: errors as values,
// context added on the way up), instead of hand-written `if (!x.ok()) return x.status();`.
#include <utility>

#define FERRY_STATUS_CONCAT_INNER(a, b) a##b
#define FERRY_STATUS_CONCAT(a, b) FERRY_STATUS_CONCAT_INNER(a, b)

// FERRY_ASSIGN_OR_RETURN(auto value, statusOrExpression); returns the error as it is.
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL(FERRY_STATUS_CONCAT(ferry_status_or_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = *std::move(tmp)

// FERRY_RETURN_IF_ERROR(statusExpression);
#define FERRY_RETURN_IF_ERROR(expr)                   \
  do {                                                \
    if (auto ferry_status_ = (expr); !ferry_status_.ok()) { \
      return ferry_status_;                           \
    }                                                 \
  } while (false)
