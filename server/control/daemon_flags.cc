#include "server/control/daemon_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace stoker {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Reflection;

constexpr std::string_view kCachePrefix = "~/.cache/";

absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

absl::Status Bad(const DaemonFlag& f, std::string_view text, std::string_view takes) {
  return absl::InvalidArgumentError(absl::StrCat("--", f.name, " ", A(text), ": takes ",
                                                 A(takes), " (stokerd --help)"));
}

bool ParseBool(std::string_view text, bool* out) {
  const std::string t = absl::AsciiStrToLower(A(text));
  if (t == "on" || t == "true" || t == "1" || t == "yes") {
    *out = true;
  } else if (t == "off" || t == "false" || t == "0" || t == "no") {
    *out = false;
  } else {
    return false;
  }
  return true;
}

std::string Takes(const DaemonFlag& f) {
  const v1::FlagSpec& s = *f.spec;
  std::string what;
  switch (f.field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      return "on or off";
    case FieldDescriptor::CPPTYPE_DOUBLE:
      what = "a number";
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      return s.choices().empty() ? "a string" : absl::StrJoin(s.choices(), ", ");
    default:
      what = s.octal() ? "an octal integer" : "an integer";
  }
  if (s.max() > 0) {
    absl::StrAppend(&what, " ", absl::StrFormat("%g", s.min()), "-", absl::StrFormat("%g", s.max()));
  } else if (s.min() > 0) {
    absl::StrAppend(&what, " >= ", absl::StrFormat("%g", s.min()));
  } else if (f.field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
    absl::StrAppend(&what, " >= 0");
  }
  if (!s.zero_word().empty()) what = absl::StrCat(s.zero_word(), ", or ", what);
  return what;
}

// Whether `v` is within the spec's range (min, and max when set).
bool InRange(const v1::FlagSpec& s, double v) { return v >= s.min() && (s.max() <= 0 || v <= s.max()); }

}  // namespace

const std::vector<DaemonFlag>& DaemonFlags() {
  static const std::vector<DaemonFlag>* flags = [] {
    auto* v = new std::vector<DaemonFlag>;
    const google::protobuf::Descriptor* d = v1::DaemonConfig::descriptor();
    for (int i = 0; i < d->field_count(); ++i) {
      DaemonFlag f;
      f.field = d->field(i);
      f.spec = &f.field->options().GetExtension(v1::flag);
      f.name = absl::StrReplaceAll(f.field->name(), {{"_", "-"}});
      f.env = absl::StrCat("STOKER_", absl::AsciiStrToUpper(f.field->name()));
      v->push_back(std::move(f));
    }
    return v;
  }();
  return *flags;
}

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

v1::DaemonConfig DefaultDaemonConfig(const EnvLookup& env) {
  std::string cache;
  if (const char* xdg = env("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    cache = xdg;
  } else if (const char* home = env("HOME"); home != nullptr && home[0] == '/') {
    cache = absl::StrCat(home, "/.cache");
  }
  v1::DaemonConfig c;
  for (const DaemonFlag& f : DaemonFlags()) {
    std::string def = f.spec->default_value();
    if (def.empty()) continue;
    if (def.rfind(kCachePrefix, 0) == 0) {
      if (cache.empty()) continue;
      def = absl::StrCat(cache, "/", def.substr(kCachePrefix.size()));
    }
    // A default that is not a value of its own flag is a bug in config.proto
    // (daemon_flags_test parses every one).
    (void)SetFlag(f, def, &c);
  }
  return c;
}

absl::Status SetFlag(const DaemonFlag& f, std::string_view text, v1::DaemonConfig* config) {
  const v1::FlagSpec& s = *f.spec;
  const Reflection* r = config->GetReflection();
  const bool zero = !s.zero_word().empty() && text == s.zero_word();
  switch (f.field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING: {
      if (!s.choices().empty() &&
          std::find(s.choices().begin(), s.choices().end(), text) == s.choices().end()) {
        return Bad(f, text, Takes(f));
      }
      r->SetString(config, f.field, zero ? std::string() : std::string(text));
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool b;
      if (!ParseBool(text, &b)) return Bad(f, text, Takes(f));
      r->SetBool(config, f.field, b);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v = 0;
      if (!zero && (!absl::SimpleAtod(A(text), &v) || !std::isfinite(v) || !InRange(s, v))) {
        return Bad(f, text, Takes(f));
      }
      r->SetDouble(config, f.field, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_INT64: {
      uint64_t v = 0;
      if (!zero) {
        const std::string t(text);
        char* end = nullptr;
        errno = 0;
        v = std::strtoull(t.c_str(), &end, s.octal() ? 8 : 10);
        const bool digits = !t.empty() && absl::ascii_isdigit(static_cast<unsigned char>(t[0]));
        if (!digits || *end != '\0' || errno == ERANGE || !InRange(s, static_cast<double>(v))) {
          return Bad(f, text, Takes(f));
        }
      }
      if (f.field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
        if (v > UINT32_MAX) return Bad(f, text, Takes(f));
        r->SetUInt32(config, f.field, static_cast<uint32_t>(v));
      } else if (f.field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
        if (v > static_cast<uint64_t>(INT64_MAX)) return Bad(f, text, Takes(f));
        r->SetInt64(config, f.field, static_cast<int64_t>(v));
      } else {
        r->SetUInt64(config, f.field, v);
      }
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(absl::StrCat("--", f.name, ": a field type flags cannot take"));
  }
}

std::string FlagValue(const DaemonFlag& f, const v1::DaemonConfig& config) {
  const v1::FlagSpec& s = *f.spec;
  const Reflection* r = config.GetReflection();
  if (f.field->has_presence() && !r->HasField(config, f.field)) return "";
  switch (f.field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string v = r->GetString(config, f.field);
      return v.empty() && !s.zero_word().empty() ? s.zero_word() : v;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(config, f.field) ? "on" : "off";
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const double v = r->GetDouble(config, f.field);
      return v == 0 && !s.zero_word().empty() ? s.zero_word() : absl::StrFormat("%g", v);
    }
    default: {
      uint64_t v;
      if (f.field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
        v = r->GetUInt32(config, f.field);
      } else if (f.field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
        v = static_cast<uint64_t>(r->GetInt64(config, f.field));
      } else {
        v = r->GetUInt64(config, f.field);
      }
      if (v == 0 && !s.zero_word().empty()) return s.zero_word();
      return s.octal() ? absl::StrFormat("0%o", v) : absl::StrCat(v);
    }
  }
}

std::string EffectiveFlagsLine(const v1::DaemonConfig& config) {
  const v1::DaemonConfig none;
  std::vector<std::string> parts;
  for (const DaemonFlag& f : DaemonFlags()) {
    const std::string v = FlagValue(f, config);
    if (f.field->has_presence() && v.empty()) continue;
    if (f.spec->hidden() && v == FlagValue(f, none)) continue;
    parts.push_back(absl::StrCat("--", f.name, "=", v));
  }
  return absl::StrJoin(parts, " ");
}

std::string DaemonFlagsHelp(std::string_view program) {
  std::string out = absl::StrCat(
      "Usage: ", A(program), " --socket PATH --data-root DIR [flags]\n\n",
      "Every flag is also STOKER_<NAME> in the environment with --from-env (the container's "
      "entrypoint):\n--data-root is STOKER_DATA_ROOT.\n\n");
  for (const DaemonFlag& f : DaemonFlags()) {
    if (f.spec->hidden()) continue;
    std::string left = absl::StrCat("  --", f.name);
    if (f.field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
      absl::StrAppend(&left, ", --no-", f.name);
    }
    std::string def;
    if (f.spec->required()) {
      def = f.spec->required_unless().empty()
                ? std::string("required")
                : absl::StrCat("required unless --",
                               absl::StrReplaceAll(f.spec->required_unless(), {{"_", "-"}}));
    } else if (!f.spec->default_value().empty()) {
      def = absl::StrCat("default ", f.spec->default_value());
    }
    absl::StrAppend(&out, left, "\n      ", f.spec->help(), def.empty() ? "" : " [", def,
                    def.empty() ? "" : "]", "\n");
  }
  absl::StrAppend(&out, "  --from-env\n      read STOKER_<NAME> for every flag not given\n",
                  "  --help, --version\n");
  return out;
}

absl::Status ParseDaemonFlags(const std::vector<std::string>& args, const EnvLookup& env,
                              std::string_view version, ParsedDaemonFlags* out) {
  const std::vector<DaemonFlag>& flags = DaemonFlags();
  auto find = [&](std::string_view name) -> const DaemonFlag* {
    for (const DaemonFlag& f : flags) {
      if (f.name == name) return &f;
    }
    return nullptr;
  };
  out->config = DefaultDaemonConfig(env);
  out->exit = false;
  struct Given {
    const DaemonFlag* flag;
    std::string value;
  };
  std::vector<Given> given;
  std::set<const DaemonFlag*> seen;
  bool from_env = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out->exit = true;
      out->output = DaemonFlagsHelp("stokerd");
      return absl::OkStatus();
    }
    if (a == "--version") {
      out->exit = true;
      out->output = absl::StrCat(A(version), "\n");
      return absl::OkStatus();
    }
    if (a == "--from-env") {
      from_env = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument ", a, ": stokerd takes only flags (stokerd --help)"));
    }
    std::string name = a.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    const DaemonFlag* f = find(name);
    if (f == nullptr && name.rfind("no-", 0) == 0 && !has_value) {
      f = find(name.substr(3));
      if (f != nullptr && f->field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
        value = "off";
        has_value = true;
      } else {
        f = nullptr;
      }
    }
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", a, " (stokerd --help lists them)"));
    }
    if (!has_value) {
      const bool is_bool = f->field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL;
      bool ignored;
      if (i + 1 < args.size() && (!is_bool || ParseBool(args[i + 1], &ignored))) {
        value = args[++i];
      } else if (is_bool) {
        value = "on";
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", f->name, " needs a value: ", Takes(*f), " (stokerd --help)"));
      }
    }
    if (!seen.insert(f).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", f->name, " is given twice (stokerd --help)"));
    }
    given.push_back({f, std::move(value)});
  }
  if (from_env) {
    for (const DaemonFlag& f : flags) {
      if (seen.count(&f) != 0) continue;
      const char* v = env(f.env.c_str());
      if (v == nullptr) continue;
      if (absl::Status st = SetFlag(f, v, &out->config); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(f.env, ": ", st.message()));
      }
      seen.insert(&f);
    }
  }
  for (const Given& g : given) {
    if (absl::Status st = SetFlag(*g.flag, g.value, &out->config); !st.ok()) return st;
  }
  for (const DaemonFlag& f : flags) {
    const google::protobuf::FieldDescriptor* unless =
        f.spec->required_unless().empty()
            ? nullptr
            : v1::DaemonConfig::descriptor()->FindFieldByName(f.spec->required_unless());
    if (unless != nullptr &&
        out->config.GetReflection()->GetBool(out->config, unless)) {
      continue;
    }
    if (f.spec->required() && seen.count(&f) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", f.name, " is required", from_env ? absl::StrCat(" (or ", f.env, ")") : "",
          ": ", f.spec->help(), " (stokerd --help)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker
