#include "pipeline/spec_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace stoker::pipeline::internal {

using v1::Op;

// The shortest text that reads back as the same float; JSON's mapping of
// the non-finite ones.
std::string FloatText(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  for (int prec = 1; prec < 9; ++prec) {
    std::string t = absl::StrFormat("%.*g", prec, v);
    if (std::strtof(t.c_str(), nullptr) == v) return t;
  }
  return absl::StrFormat("%.9g", v);
}

// The same for a double.
std::string DoubleText(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  for (int prec = 1; prec < 17; ++prec) {
    std::string t = absl::StrFormat("%.*g", prec, v);
    if (std::strtod(t.c_str(), nullptr) == v) return t;
  }
  return absl::StrFormat("%.17g", v);
}


std::string ValueText(const pb::Value& v) {
  switch (v.kind_case()) {
    case pb::Value::kNumberValue:
      for (int prec = 1; prec < 17; ++prec) {
        std::string t = absl::StrFormat("%.*g", prec, v.number_value());
        if (std::strtod(t.c_str(), nullptr) == v.number_value()) return t;
      }
      return absl::StrFormat("%.17g", v.number_value());
    case pb::Value::kStringValue:
      return absl::StrCat("'", v.string_value(), "'");
    case pb::Value::kBoolValue:
      return v.bool_value() ? "true" : "false";
    case pb::Value::kNullValue:
      return "null";
    case pb::Value::kListValue:
      return "a list";
    case pb::Value::kStructValue:
      return "an object";
    default:
      return "nothing";
  }
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

std::string FieldNames(const pb::Descriptor* d, bool json_names) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) {
    names.push_back(json_names ? d->field(i)->json_name() : d->field(i)->name());
  }
  return absl::StrJoin(names, ", ");
}

// The op's torchvision name ("RandomCrop"), its oneof field's JSON name.
std::string OpName(const Op& op) {
  const pb::FieldDescriptor* f = Op::descriptor()->FindFieldByNumber(op.op_case());
  return f == nullptr ? std::string("(no op)") : f->json_name();
}

std::string OpName(Op::OpCase c) { return Op::descriptor()->FindFieldByNumber(c)->json_name(); }

// ---------------------------------------------------------------------------
// JSON (a google.protobuf.Struct) into messages, by reflection: the proto's
// JSON mapping, plus a bare value for a repeated field read as a 1-element
// list (torchvision's `32` for a size), and errors that name the op.

absl::Status ParseObject(absl::string_view json, pb::Struct* out, absl::string_view what) {
  if (json.find_first_not_of(" \t\r\n") == absl::string_view::npos) return absl::OkStatus();
  pb::util::Status st =
      pb::util::JsonStringToMessage(pb::StringPiece(json.data(), json.size()), out);
  if (!st.ok()) {
    return Bad(what, " are not a JSON object: ",
               absl::string_view(st.message().data(), st.message().size()));
  }
  return absl::OkStatus();
}

const pb::FieldDescriptor* FindField(const pb::Descriptor* d, absl::string_view key) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->name() == key || f->json_name() == key) return f;
  }
  return nullptr;
}

bool IsOpParams(const pb::Descriptor* d) {
  const pb::Descriptor* op = Op::descriptor();
  for (int i = 0; i < op->field_count(); ++i) {
    if (op->field(i)->message_type() == d) return true;
  }
  return false;
}


// One value of field `f` (set, or appended to a repeated field); `label`
// names it in errors.
absl::Status AddValue(pb::Message* m, const pb::FieldDescriptor* f, const pb::Value& v,
                      const std::string& label) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      const bool wide = f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64;
      uint64_t x = 0;
      if (v.kind_case() == pb::Value::kNumberValue) {
        const double d = v.number_value();
        const bool fits = wide ? d < 18446744073709551616.0 : d <= 4294967295.0;
        if (!(d >= 0 && fits && d == std::floor(d))) {
          return Bad(label, " must be a whole number >= 0, not ", ValueText(v));
        }
        x = static_cast<uint64_t>(d);
      } else if (!(wide && v.kind_case() == pb::Value::kStringValue &&
                   absl::SimpleAtoi(v.string_value(), &x))) {
        // (A 64-bit integer may be a string in the JSON mapping.)
        return Bad(label, " must be a whole number >= 0, not ", ValueText(v));
      }
      if (wide) {
        rep ? r->AddUInt64(m, f, x) : r->SetUInt64(m, f, x);
      } else {
        rep ? r->AddUInt32(m, f, static_cast<uint32_t>(x))
            : r->SetUInt32(m, f, static_cast<uint32_t>(x));
      }
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      const double d = v.kind_case() == pb::Value::kNumberValue ? v.number_value() : 0.5;
      if (!(d >= -2147483648.0 && d <= 2147483647.0 && d == std::floor(d))) {
        return Bad(label, " must be a whole number, not ", ValueText(v));
      }
      rep ? r->AddInt32(m, f, static_cast<int32_t>(d)) : r->SetInt32(m, f, static_cast<int32_t>(d));
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      float x = 0;
      if (v.kind_case() == pb::Value::kNumberValue) {
        const double d = v.number_value();
        if (std::fabs(d) > std::numeric_limits<float>::max()) {
          return Bad(label, " is out of range: ", ValueText(v));
        }
        x = static_cast<float>(d);
      } else if (v.kind_case() == pb::Value::kStringValue && v.string_value() == "NaN") {
        x = std::numeric_limits<float>::quiet_NaN();
      } else if (v.kind_case() == pb::Value::kStringValue &&
                 (v.string_value() == "Infinity" || v.string_value() == "-Infinity")) {
        x = std::numeric_limits<float>::infinity();
        if (v.string_value()[0] == '-') x = -x;
      } else {
        return Bad(label, " must be a number, not ", ValueText(v));
      }
      rep ? r->AddFloat(m, f, x) : r->SetFloat(m, f, x);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      double x = 0;
      if (v.kind_case() == pb::Value::kNumberValue) {
        x = v.number_value();
      } else if (v.kind_case() == pb::Value::kStringValue && v.string_value() == "NaN") {
        x = std::numeric_limits<double>::quiet_NaN();
      } else if (v.kind_case() == pb::Value::kStringValue &&
                 (v.string_value() == "Infinity" || v.string_value() == "-Infinity")) {
        x = std::numeric_limits<double>::infinity();
        if (v.string_value()[0] == '-') x = -x;
      } else {
        return Bad(label, " must be a number, not ", ValueText(v));
      }
      rep ? r->AddDouble(m, f, x) : r->SetDouble(m, f, x);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      if (v.kind_case() != pb::Value::kBoolValue) {
        return Bad(label, " must be true or false, not ", ValueText(v));
      }
      rep ? r->AddBool(m, f, v.bool_value()) : r->SetBool(m, f, v.bool_value());
      return absl::OkStatus();
    case pb::FieldDescriptor::CPPTYPE_STRING:
      if (v.kind_case() != pb::Value::kStringValue) {
        return Bad(label, " must be a string, not ", ValueText(v));
      }
      rep ? r->AddString(m, f, v.string_value()) : r->SetString(m, f, v.string_value());
      return absl::OkStatus();
    case pb::FieldDescriptor::CPPTYPE_MESSAGE: {
      if (v.kind_case() != pb::Value::kStructValue && v.kind_case() != pb::Value::kNullValue) {
        return Bad(label, " must be an object, not ", ValueText(v));
      }
      pb::Message* child = rep ? r->AddMessage(m, f) : r->MutableMessage(m, f);
      if (v.kind_case() == pb::Value::kNullValue) return absl::OkStatus();
      return FillMessage(child, v.struct_value(), label);
    }
    default:
      return absl::InternalError(absl::StrCat(label, ": a field type pipeline_spec cannot read"));
  }
}

// Field `f` of `m` from a JSON value; `label` names it in errors.
absl::Status SetField(pb::Message* m, const pb::FieldDescriptor* f, const pb::Value& v,
                      const std::string& label) {
  if (v.kind_case() == pb::Value::kNullValue &&
      f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) {
    return absl::OkStatus();  // JSON's null: the default
  }
  if (!f->is_repeated()) {
    if (v.kind_case() == pb::Value::kListValue) {
      return Bad(label, " takes one value, not a list");
    }
    return AddValue(m, f, v, label);
  }
  m->GetReflection()->ClearField(m, f);
  if (v.kind_case() != pb::Value::kListValue) return AddValue(m, f, v, label);
  const auto& items = v.list_value().values();
  for (int i = 0; i < items.size(); ++i) {
    // Ops are named by position; values of a list by the list.
    const std::string item_label = f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE
                                       ? absl::StrCat(label, "[", i, "]")
                                       : label;
    if (items[i].kind_case() == pb::Value::kListValue) {
      return Bad(item_label, " must hold values, not lists");
    }
    if (absl::Status st = AddValue(m, f, items[i], item_label); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// `label` is the message's name in errors: "ops[2]" for an Op, "ops[2]
// ColorJitter" for an op's parameters, "output" for the output, "" for the
// spec.
absl::Status FillMessage(pb::Message* m, const pb::Struct& s, const std::string& label) {
  const pb::Descriptor* d = m->GetDescriptor();
  if (d == Op::descriptor()) {
    if (s.fields().size() != 1) {
      return Bad(label, ": an op is an object with one key, its name (",
                 FieldNames(d, /*json_names=*/true), "), not ", absl::StrCat(s.fields().size()));
    }
    const auto& [name, params] = *s.fields().begin();
    const pb::FieldDescriptor* f = FindField(d, name);
    if (f == nullptr) {
      return Bad(label, ": unknown op '", name, "'; the ops are ",
                 FieldNames(d, /*json_names=*/true));
    }
    return SetField(m, f, params, absl::StrCat(label, " ", f->json_name()));
  }
  const bool op_params = IsOpParams(d);
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.fields()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());  // the same error first, whatever the map's order
  for (const std::string& k : keys) {
    const pb::FieldDescriptor* f = FindField(d, k);
    const std::string prefix = label.empty() ? "" : absl::StrCat(label, op_params ? ": " : ".");
    // RandomErasing's value="random", torchvision's spelling of value_random.
    if (d == v1::RandomErasing::descriptor() && k == "value" &&
        s.fields().at(k).kind_case() == pb::Value::kStringValue) {
      if (s.fields().at(k).string_value() != "random") {
        return Bad(prefix, "value: If value is str, it should be 'random', not ",
                   ValueText(s.fields().at(k)));
      }
      m->GetReflection()->SetBool(m, d->FindFieldByName("value_random"), true);
      continue;
    }
    if (f == nullptr) {
      return Bad(prefix, "unknown ", op_params ? "parameter" : "field", " '", k,
                 absl::StrCat("'; ", d->name(), " takes ", FieldNames(d, /*json_names=*/false)));
    }
    if (absl::Status st = SetField(m, f, s.fields().at(k), absl::StrCat(prefix, f->name()));
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}


// One value of field `f` (the i-th of a repeated one; -1: the field), as AppendFields writes it.
void AppendValue(const pb::Message& m, const pb::FieldDescriptor* f, int i, std::string* out,
                 bool json);

// The set fields of `m`, as "name=value, ..." (Describe) or a JSON object.
void AppendFields(const pb::Message& m, std::string* out, bool json) {
  std::vector<const pb::FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);
  const bool op = m.GetDescriptor() == Op::descriptor();
  if (json) *out += '{';
  for (size_t k = 0; k < fields.size(); ++k) {
    const pb::FieldDescriptor* f = fields[k];
    if (k > 0) *out += json ? "," : ", ";
    const std::string& name = op ? f->json_name() : f->name();
    absl::StrAppend(out, json ? JsonQuote(name) : name, json ? ":" : "=");
    if (!f->is_repeated()) {
      AppendValue(m, f, -1, out, json);
      continue;
    }
    *out += '[';
    const int n = m.GetReflection()->FieldSize(m, f);
    for (int i = 0; i < n; ++i) {
      if (i > 0) *out += json ? "," : ", ";
      AppendValue(m, f, i, out, json);
    }
    *out += ']';
  }
  if (json) *out += '}';
}

void AppendValue(const pb::Message& m, const pb::FieldDescriptor* f, int i, std::string* out,
                 bool json) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      absl::StrAppend(out, rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      absl::StrAppend(out, rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT32:
      absl::StrAppend(out, rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      const float v = rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f);
      absl::StrAppend(out, json && !std::isfinite(v) ? JsonQuote(FloatText(v)) : FloatText(v));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      const double v = rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f);
      absl::StrAppend(out, json && !std::isfinite(v) ? JsonQuote(DoubleText(v)) : DoubleText(v));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      absl::StrAppend(out,
                      (rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f)) ? "true" : "false");
      break;
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      const std::string v = rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
      absl::StrAppend(out, json ? JsonQuote(v) : v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      AppendFields(rep ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f), out, json);
      break;
    default:
      break;  // no other type in PipelineSpec
  }
}


}  // namespace stoker::pipeline::internal
