// Errors on the plugin side of the ABI: an exception inside the plugin, a status plus a
// thread-local message at the boundary. Used by the LCA_EXPORT_* adapters.
// Rule: no exception may leave a vtable function; always go through lca::detail::guard.
#pragma once

#include <lca/abi.h>

#include <exception>
#include <new>
#include <string>
#include <utility>

namespace lca {

// Throw inside plugin code; the adapter turns it into (status, last_error()).
class Error : public std::exception {
 public:
  Error(lca_status status, std::string message) : status_(status), message_(std::move(message)) {}
  lca_status status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  lca_status status_;
  std::string message_;
};

inline void require(bool condition, lca_status status, const std::string& message) {
  if (!condition) throw Error(status, message);
}

namespace detail {

// One message per thread per plugin library (plugins are built with hidden visibility, so
// this inline variable is not merged across libraries).
inline std::string& last_error_storage() {
  thread_local std::string message = "no error";
  return message;
}

inline const char* last_error() { return last_error_storage().c_str(); }

inline lca_status fail(lca_status status, const char* message) {
  last_error_storage() = message ? message : "unknown error";
  return status;
}

// Runs f() and maps every exception to a status and a message.
template <class F>
lca_status guard(F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return LCA_OK;
  } catch (const Error& e) {
    return fail(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(LCA_ERR_OUT_OF_MEMORY, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return fail(LCA_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(LCA_ERR_INTERNAL, "unknown exception in plugin");
  }
}

}  // namespace detail
}  // namespace lca
