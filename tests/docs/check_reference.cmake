# Fails naming every public name of ferry's headers that docs/reference.md does not document.
#
#   cmake -D HEADERS=<dir holding ferry/> -D REFERENCE=<docs/reference.md> [-D LIST=ON] -P check_reference.cmake
#
# A public name is a class, struct, union, enum, alias, concept, variable or function declared
# at namespace scope in `ferry` or one of its namespaces (`ferry::nn`, `ferry::optim`,
# `ferry::random`, `ferry::specs`, ...), outside any `detail` namespace, anonymous namespace or
# `ferry::kernels`. It counts as documented when an entry heading of the reference (a line
# starting with `###`; the `##` headings name headers) holds it in a code span, qualified below
# `ferry` as users spell it: `matmul` (or `ferry::matmul`), `nn::Linear`, `optim::Adam`,
# `random::key`, `specs::tiny`; a free operator as
# `operator<<`. LIST=ON prints every public name found, one a line, and checks nothing.
#
# The scan is a line-based reading of the headers, not a C++ parser: it relies on the house style
# (one `namespace X {` a line, closed by `}  // namespace X`; a declaration's name on the line of
# its first parenthesis or brace). Comments, string and character literals are removed first.

cmake_minimum_required(VERSION 3.25)

if(NOT HEADERS OR NOT REFERENCE)
  message(FATAL_ERROR "check_reference.cmake needs -D HEADERS=... -D REFERENCE=...")
endif()

# Words that take parentheses but name nothing declared.
set(keywords decltype noexcept sizeof alignof alignas static_assert requires explicit return
    if while for switch typename template operator)

# ---- the public names of one header -------------------------------------------------------------
function(public_names_of header out_var)
  file(READ "${header}" text)
  # Characters CMake lists treat specially become placeholders, then each line an element.
  string(REPLACE "\\" "@BS@" text "${text}")
  string(REPLACE ";" "@SC@" text "${text}")
  string(REPLACE "[" "@LB@" text "${text}")
  string(REPLACE "]" "@RB@" text "${text}")
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" " " text "${text}")  # block comments
  string(REPLACE "\n" ";" lines "${text}")

  set(names "")
  set(stack "")           # one entry per open brace: ns:<name>, private, or block
  set(in_statement OFF)   # a declaration at namespace scope has begun
  set(head "")            # its text, the lines of template parameters and requires-clauses aside
  set(paren 0)            # parentheses open inside the statement
  set(angle_open OFF)     # a `template <` line whose list goes on
  set(in_requires OFF)    # a requires-clause whose parentheses go on
  set(continued OFF)      # a preprocessor line ended with a backslash
  foreach(line IN LISTS lines)
    if(continued)
      if(NOT line MATCHES "@BS@[ \t]*$")
        set(continued OFF)
      endif()
      continue()
    endif()
    if(line MATCHES "^[ \t]*#")
      if(line MATCHES "@BS@[ \t]*$")
        set(continued ON)
      endif()
      continue()
    endif()
    # Literals, then line comments.
    string(REGEX REPLACE "\"(@BS@.|[^\"@]|@[^B]|@B[^S])*\"" "\"\"" line "${line}")
    string(REGEX REPLACE "'(@BS@.|[^'@])'" "' '" line "${line}")
    string(REGEX REPLACE "//.*$" "" line "${line}")
    string(STRIP "${line}" line)
    if(line STREQUAL "")
      continue()
    endif()

    # Where this line starts: at namespace scope (every open brace a namespace), and public?
    set(ns_scope ON)
    set(public ON)
    set(qualifier "")
    foreach(entry IN LISTS stack)
      if(entry STREQUAL "block")
        set(ns_scope OFF)
      elseif(entry STREQUAL "private")
        set(public OFF)
      else()
        string(SUBSTRING "${entry}" 3 -1 part)
        if(NOT part STREQUAL "ferry")
          string(APPEND qualifier "${part}::")
        endif()
      endif()
    endforeach()
    string(REGEX REPLACE "^ferry::" "" qualifier "${qualifier}")

    set(ns_name "")
    if(line MATCHES "^(inline[ \t]+)?namespace[ \t]*([A-Za-z_:]*)[ \t]*{")
      set(ns_name "${CMAKE_MATCH_2}")
      if(ns_name STREQUAL "")
        set(ns_name "@anonymous@")
      endif()
    elseif(ns_scope AND public AND NOT in_statement AND NOT stack STREQUAL "" AND line MATCHES "^[A-Za-z_@]")
      set(in_statement ON)
      set(head "")
      set(paren 0)
      set(angle_open OFF)
      set(in_requires OFF)
    endif()

    # The head of the statement: template parameter lists and requires-clauses are left out.
    if(in_statement)
      if(angle_open)
        set(text "")  # inside a template parameter list that began on an earlier line
      else()
        set(text "${line}")
      endif()
      if(text MATCHES "^template[ \t]*<")
        set(stripped "${text}")
        foreach(i RANGE 8)
          string(REGEX REPLACE "<[^<>]*>" "" stripped "${stripped}")
        endforeach()
        if(stripped MATCHES "<")
          set(text "")  # the list goes on past this line
          set(angle_open ON)
          string(REGEX MATCHALL "<" opens "${line}")
          string(REGEX MATCHALL ">" closes "${line}")
          list(LENGTH opens n_open)
          list(LENGTH closes n_close)
          math(EXPR angle_count "${n_open}-${n_close}")
        else()
          string(REGEX REPLACE "^template[ \t]*" "" text "${stripped}")
        endif()
      elseif(angle_open)
        string(REGEX MATCHALL "<" opens "${line}")
        string(REGEX MATCHALL ">" closes "${line}")
        list(LENGTH opens n_open)
        list(LENGTH closes n_close)
        math(EXPR angle_count "${angle_count}+${n_open}-${n_close}")
        if(angle_count LESS_EQUAL 0)
          set(angle_open OFF)
        endif()
      endif()
      if(text MATCHES "^requires" OR in_requires)
        set(text "")
        set(in_requires ON)
      endif()
      string(APPEND head " ${text}")
    endif()

    # The structure of the line, in order.
    string(REGEX MATCHALL "[{}()]|@SC@" marks "${line}")
    set(ns_pending "${ns_name}")
    foreach(mark IN LISTS marks)
      if(mark STREQUAL "(")
        math(EXPR paren "${paren}+1")
      elseif(mark STREQUAL ")")
        math(EXPR paren "${paren}-1")
      elseif(mark STREQUAL "{")
        if(NOT ns_pending STREQUAL "")
          if(ns_pending MATCHES "(^|::)detail$|_detail$|@anonymous@|^kernels$|(^|::)kernels(::|$)|^std$")
            list(APPEND stack "private")
          else()
            # `namespace ferry::nn {` opens two namespaces as one brace: keep the whole name.
            list(APPEND stack "ns:${ns_pending}")
          endif()
          set(ns_pending "")
        else()
          list(APPEND stack "block")
          if(in_statement AND paren EQUAL 0)
            set(in_statement OFF)
            set(finished "${head}")
            set(finished_qualifier "${qualifier}")
          endif()
        endif()
      elseif(mark STREQUAL "}")
        list(POP_BACK stack)
      elseif(mark STREQUAL "@SC@")
        if(in_statement AND paren EQUAL 0)
          set(in_statement OFF)
          set(finished "${head}")
          set(finished_qualifier "${qualifier}")
        endif()
      endif()
    endforeach()
    if(in_requires AND paren EQUAL 0 AND NOT line MATCHES "(&&|@BS@@BS@|\\|\\|)$")
      set(in_requires OFF)
    endif()

    if(DEFINED finished)
      name_of_declaration("${finished}" found)
      if(NOT found STREQUAL "")
        list(APPEND names "${finished_qualifier}${found}")
      endif()
      unset(finished)
    endif()
  endforeach()
  set(${out_var} "${names}" PARENT_SCOPE)
endfunction()

# ---- the name one declaration's head declares (empty for none) ---------------------------------
function(name_of_declaration head out_var)
  set(name "")
  string(REGEX REPLACE "@LB@@LB@([^@]|@[^R]|@R[^B])*@RB@@RB@" " " head "${head}")  # attributes
  string(REGEX REPLACE "^[ \t]+" "" head "${head}")
  if(head MATCHES "^(static_assert|using[ \t]+namespace|namespace|extern|friend|template[ \t]+(class|struct)[ \t]+[A-Za-z_0-9]+[ \t]*<)")
    set(${out_var} "" PARENT_SCOPE)
    return()
  endif()
  if(head MATCHES "^using[ \t]+([A-Za-z_][A-Za-z_0-9]*)[ \t]*=")
    set(name "${CMAKE_MATCH_1}")
  elseif(head MATCHES "^using[ \t]")
    set(name "")  # a using-declaration brings in a name declared elsewhere
  elseif(head MATCHES "^concept[ \t]+([A-Za-z_][A-Za-z_0-9]*)")
    set(name "${CMAKE_MATCH_1}")
  elseif(head MATCHES "^(class|struct|union|enum[ \t]+class|enum[ \t]+struct|enum)[ \t]+([A-Za-z_][A-Za-z_0-9]*)")
    set(name "${CMAKE_MATCH_2}")
  elseif(head MATCHES "operator[ \t]*([^A-Za-z_0-9 \t(][^ \t(]*|\\(\\))[ \t]*\\(")
    set(name "operator${CMAKE_MATCH_1}")
    if(head MATCHES "[A-Za-z_0-9>]::operator")
      set(name "")  # a member defined out of its class
    endif()
  else()
    # Template arguments go (innermost first), then the first identifier called is the name.
    foreach(i RANGE 8)
      string(REGEX REPLACE "<[^<>]*>" "" head "${head}")
    endforeach()
    set(rest "${head}")
    foreach(i RANGE 8)
      if(NOT rest MATCHES "([A-Za-z_~][A-Za-z_0-9]*(::[A-Za-z_~][A-Za-z_0-9]*)*)[ \t]*\\((.*)$")
        break()
      endif()
      set(candidate "${CMAKE_MATCH_1}")
      set(rest "${CMAKE_MATCH_3}")
      if(candidate IN_LIST keywords)
        continue()
      endif()
      if(candidate MATCHES "::")
        set(name "")  # a member defined out of its class
      else()
        set(name "${candidate}")
      endif()
      break()
    endforeach()
    if(name STREQUAL "" AND NOT head MATCHES "\\(")
      # A variable: the last identifier before its initializer.
      if(head MATCHES "([A-Za-z_][A-Za-z_0-9]*)[ \t]*(=|{|@SC@|$)")
        string(REGEX MATCH "([A-Za-z_][A-Za-z_0-9]*)[ \t]*(=.*|{.*|@SC@.*|)$" _ "${head}")
        string(REGEX REPLACE "[ \t]*(=|{|@SC@).*$" "" before "${head}")
        string(REGEX MATCH "[A-Za-z_][A-Za-z_0-9]*$" name "${before}")
        if(name MATCHES "^(class|struct|enum|const|constexpr|inline)$")
          set(name "")
        endif()
      endif()
    endif()
  endif()
  set(${out_var} "${name}" PARENT_SCOPE)
endfunction()

# ---- every header, then the reference ------------------------------------------------------------
file(GLOB_RECURSE headers "${HEADERS}/ferry/*.hpp")
list(SORT headers)
set(all_names "")
foreach(header IN LISTS headers)
  if(header MATCHES "/ferry/(kernels|detail)/")
    continue()
  endif()
  public_names_of("${header}" found)
  list(APPEND all_names ${found})
endforeach()
list(REMOVE_DUPLICATES all_names)
list(SORT all_names)

if(LIST)
  foreach(name IN LISTS all_names)
    message("${name}")
  endforeach()
  return()
endif()

# The names the reference's headings hold in code spans.
file(STRINGS "${REFERENCE}" headings REGEX "^###")
set(documented "")
foreach(heading IN LISTS headings)
  string(REGEX MATCHALL "`[^`]+`" spans "${heading}")
  foreach(span IN LISTS spans)
    string(REGEX MATCHALL "operator[^A-Za-z_0-9 `(,][^ `(,]*|operator\\(\\)|[A-Za-z_][A-Za-z_0-9]*(::[A-Za-z_][A-Za-z_0-9]*)*" tokens "${span}")
    foreach(token IN LISTS tokens)
      string(REGEX REPLACE "^ferry::" "" token "${token}")
      list(APPEND documented "${token}")
    endforeach()
  endforeach()
endforeach()

set(missing "")
foreach(name IN LISTS all_names)
  if(NOT name IN_LIST documented)
    list(APPEND missing "${name}")
  endif()
endforeach()
list(LENGTH all_names n_names)
if(missing)
  list(LENGTH missing n_missing)
  list(JOIN missing "\n  " missing_text)
  message(FATAL_ERROR "docs/reference.md does not document ${n_missing} of the ${n_names} public "
                      "names (add a heading holding each in a code span):\n  ${missing_text}")
endif()
message(STATUS "docs/reference.md documents all ${n_names} public names")
