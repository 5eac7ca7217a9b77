#pragma once
// What a call throws, checked by exact type and message: shared by every test of errors.

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <typeinfo>

namespace ferry_test {

/// The message of what `f` throws when it is exactly an `E` (not a subclass); otherwise a line
/// saying what happened instead, which a failed EXPECT_EQ prints.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    (void)f();
  } catch (const E& e) {
    if (typeid(e) != typeid(E)) return std::string("a subclass of the type expected: ") + e.what();
    return e.what();
  } catch (const std::exception& e) {
    return std::string("another exception type (") + typeid(e).name() + "): " + e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
  return "no exception";
}

/// Expects `f` to throw exactly an `E` whose message is `message`.
template <class E, class F>
void expect_error(F&& f, const std::string& message) {
  EXPECT_EQ(message_of<E>(f), message);
}

}  // namespace ferry_test
