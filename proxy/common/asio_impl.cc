// The single translation unit that compiles Asio (and its SSL layer) for the whole
// project; see BOOST_ASIO_SEPARATE_COMPILATION in the top-level CMakeLists.txt.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
