// stokerd's flags, derived from its configuration message.
//
// proto/stoker/v1/config.proto's DaemonConfig is the one definition of every
// setting: its fields, in order, are the flags (data_root is --data-root,
// STOKER_DATA_ROOT with --from-env), each with the help, default and range of
// its FlagSpec option. Nothing here names a field: a field added to the
// message is a flag, an environment variable, a Python private-daemon
// argument and a line of Status.config with no other change.
//
// Syntax (ParseDaemonFlags):
//   --NAME VALUE, --NAME=VALUE     every field
//   --NAME, --no-NAME              bool fields (also --NAME on|off|true|false|1|0)
//   --from-env                     STOKER_<NAME> for each field not given as a flag
//   --help, --version
// A value is checked against its FlagSpec (number syntax, range, choices,
// zero word); every error names the flag and what it takes.
//
// Thread safety: DaemonFlags() is built once (thread-safe static) and
// immutable; the other functions are pure.

#ifndef STOKER_SERVER_CONTROL_DAEMON_FLAGS_H_
#define STOKER_SERVER_CONTROL_DAEMON_FLAGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "stoker/v1/config.pb.h"

namespace stoker {

// One DaemonConfig field as a flag. `field` and `spec` point into the
// generated descriptors (static lifetime).
struct DaemonFlag {
  const google::protobuf::FieldDescriptor* field = nullptr;
  const v1::FlagSpec* spec = nullptr;
  std::string name;  // "data-root"
  std::string env;   // "STOKER_DATA_ROOT"
};

// Every field, in the message's order.
const std::vector<DaemonFlag>& DaemonFlags();

// Reads an environment variable; nullptr when unset. Injected so that tests
// need no real environment.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup ProcessEnv();

// The configuration with every field at its default: "~/.cache/..." under
// $XDG_CACHE_HOME when absolute, else $HOME/.cache, else empty (`env`
// supplies both).
v1::DaemonConfig DefaultDaemonConfig(const EnvLookup& env);

// Sets the flag's field from its flag syntax; INVALID_ARGUMENT naming the
// flag and what it takes when `text` is not a value of it.
absl::Status SetFlag(const DaemonFlag& flag, std::string_view text, v1::DaemonConfig* config);

// The field's value in its flag's syntax ("auto", "0600", "on", "4096");
// empty for an unset optional field.
std::string FlagValue(const DaemonFlag& flag, const v1::DaemonConfig& config);

// The effective configuration as one line of flags ("--socket=/run/s.sock
// --data-root=/data ..."), hidden flags left out unless set: for the log.
std::string EffectiveFlagsLine(const v1::DaemonConfig& config);

// --help's text: every flag not hidden, with its default and help.
std::string DaemonFlagsHelp(std::string_view program);

struct ParsedDaemonFlags {
  v1::DaemonConfig config;
  // --help or --version: print `output` to stdout and exit 0.
  bool exit = false;
  std::string output;
};

// Parses stokerd's arguments (argv[0] excluded): defaults, then (with
// --from-env) the environment, then the flags. INVALID_ARGUMENT for an
// unknown flag, a flag given twice, a bad value or a missing required one;
// the message names the flag and ends with "(stokerd --help)".
absl::Status ParseDaemonFlags(const std::vector<std::string>& args, const EnvLookup& env,
                              std::string_view version, ParsedDaemonFlags* out);

// Units, where the flag's is not the engine's.
inline uint64_t MiB(double mb) { return static_cast<uint64_t>(mb * 1048576.0); }

}  // namespace stoker

#endif  // STOKER_SERVER_CONTROL_DAEMON_FLAGS_H_
