// Boost.JSON compiled into ferry-cni itself (header-only mode), so that the static plugin
// binary needs no libboost_json on the node.
#include <boost/json/src.hpp>
