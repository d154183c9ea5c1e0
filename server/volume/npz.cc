#include "server/volume/npz.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"
#include "common/posix.h"
#include "server/volume/npy.h"

namespace stoker::volume {
namespace {

absl::Status Bad(const std::string& name, const std::string& what) {
  return absl::DataLossError(absl::StrCat(name, ": ", what));
}

struct Member {
  std::string name;
  uint16_t method = 0;
  uint16_t flags = 0;
  uint64_t compressed = 0;
  uint64_t size = 0;
  uint64_t header_offset = 0;  // of its local header, from the archive's start
};

// The central directory's entries.
absl::StatusOr<std::vector<Member>> ListMembers(int fd, uint64_t offset, uint64_t length,
                                                const std::string& name) {
  // The end of central directory record: 22 bytes and a comment of up to
  // 64 KiB, at the end.
  const uint64_t tail_len = std::min<uint64_t>(length, 22 + 65535 + 20);
  std::vector<uint8_t> tail(tail_len);
  absl::StatusOr<size_t> got = ReadFullyAt(fd, offset + length - tail_len, tail.data(), tail_len, name);
  if (!got.ok()) return got.status();
  if (*got != tail_len) return Bad(name, "the file shrank while being read");
  int64_t eocd = -1;
  for (int64_t at = static_cast<int64_t>(tail_len) - 22; at >= 0; --at) {
    if (LoadLe32(&tail[at]) == 0x06054b50) {
      eocd = at;
      break;
    }
  }
  if (eocd < 0) return Bad(name, "not a zip archive (no end of central directory)");
  const uint8_t* e = &tail[eocd];
  uint64_t entries = LoadLe16(e + 10), cd_size = LoadLe32(e + 12), cd_offset = LoadLe32(e + 16);
  if (entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // zip64: its locator sits just before the record.
    if (eocd < 20 || LoadLe32(&tail[eocd - 20]) != 0x07064b50) {
      return Bad(name, "a zip64 archive without its end of central directory locator");
    }
    const uint64_t z64 = LoadLe64(&tail[eocd - 20 + 8]);
    uint8_t rec[56];
    if (z64 > length - 56) return Bad(name, "the zip64 end record lies outside the file");
    got = ReadFullyAt(fd, offset + z64, rec, sizeof(rec), name);
    if (!got.ok()) return got.status();
    if (*got != sizeof(rec) || LoadLe32(rec) != 0x06064b50) return Bad(name, "a bad zip64 end record");
    entries = LoadLe64(rec + 32);
    cd_size = LoadLe64(rec + 40);
    cd_offset = LoadLe64(rec + 48);
  }
  if (cd_offset > length || cd_size > length - cd_offset || entries > cd_size / 46) {
    return Bad(name, "the central directory does not fit the file");
  }
  std::vector<uint8_t> cd(cd_size);
  got = ReadFullyAt(fd, offset + cd_offset, cd.data(), cd.size(), name);
  if (!got.ok()) return got.status();
  if (*got != cd.size()) return Bad(name, "the file shrank while being read");
  std::vector<Member> members;
  size_t at = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    if (cd.size() - at < 46 || LoadLe32(&cd[at]) != 0x02014b50) {
      return Bad(name, absl::StrCat("central directory entry ", i, " is damaged"));
    }
    const uint8_t* c = &cd[at];
    Member m;
    m.flags = LoadLe16(c + 8);
    m.method = LoadLe16(c + 10);
    m.compressed = LoadLe32(c + 20);
    m.size = LoadLe32(c + 24);
    m.header_offset = LoadLe32(c + 42);
    const size_t n = LoadLe16(c + 28), extra = LoadLe16(c + 30), comment = LoadLe16(c + 32);
    if (cd.size() - at - 46 < n + extra + comment) {
      return Bad(name, absl::StrCat("central directory entry ", i, " runs past its end"));
    }
    m.name.assign(reinterpret_cast<const char*>(c + 46), n);
    // zip64 sizes: only the fields that are 0xffffffff above, in order.
    const uint8_t* x = c + 46 + n;
    for (size_t k = 0; k + 4 <= extra;) {
      const uint16_t id = LoadLe16(x + k), len = LoadLe16(x + k + 2);
      if (k + 4 + len > extra) break;
      if (id == 0x0001) {
        const uint8_t* v = x + k + 4;
        size_t left = len;
        for (uint64_t* f : {&m.size, &m.compressed, &m.header_offset}) {
          if (*f != 0xffffffff) continue;
          if (left < 8) return Bad(name, absl::StrCat("member '", m.name, "': a short zip64 field"));
          *f = LoadLe64(v);
          v += 8;
          left -= 8;
        }
      }
      k += 4 + len;
    }
    members.push_back(std::move(m));
    at += 46 + n + extra + comment;
  }
  return members;
}

// Inflates a raw deflate stream into exactly `size` bytes: never more (a
// bomb stops at the stated size), and a stream that ends short fails.
absl::Status Inflate(const std::vector<uint8_t>& in, std::vector<uint8_t>* out, uint64_t size,
                     const std::string& what) {
  out->resize(size);
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
    return absl::ResourceExhaustedError(what + ": starting inflate");
  }
  const uint8_t* src = in.data();
  uint8_t* dst = out->data();
  uint64_t in_left = in.size(), out_left = size;
  int r = Z_OK;
  bool progress = true;
  while (r == Z_OK && progress) {
    // zlib counts in uInt: at most 1 GiB each way a call.
    const uInt ai = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
    const uInt ao = static_cast<uInt>(std::min<uint64_t>(out_left, 1u << 30));
    z.next_in = const_cast<uint8_t*>(src);
    z.avail_in = ai;
    z.next_out = dst;
    z.avail_out = ao;
    r = inflate(&z, Z_NO_FLUSH);
    progress = z.avail_in != ai || z.avail_out != ao;
    src += ai - z.avail_in;
    in_left -= ai - z.avail_in;
    dst += ao - z.avail_out;
    out_left -= ao - z.avail_out;
  }
  inflateEnd(&z);
  if (r != Z_STREAM_END || out_left != 0) {
    return absl::DataLossError(what + ": the deflate stream does not inflate to its stated size");
  }
  return absl::OkStatus();
}

// One member's array.
absl::StatusOr<Volume> ReadMember(int fd, uint64_t offset, uint64_t length, const Member& m,
                                  const std::string& name, const VolumeLimits& limits,
                                  const std::array<double, 3>& spacing) {
  const std::string what = absl::StrCat(name, ":", m.name);
  if ((m.flags & 1) != 0) return absl::UnimplementedError(what + ": an encrypted member");
  if (m.method != 0 && m.method != 8) {
    return absl::UnimplementedError(
        absl::StrCat(what, ": compression method ", m.method, " (stoker reads stored and deflated "
                                                              "members, as numpy writes them)"));
  }
  uint8_t local[30];
  if (m.header_offset > length || length - m.header_offset < sizeof(local)) {
    return Bad(what, "its local header lies outside the file");
  }
  absl::StatusOr<size_t> got = ReadFullyAt(fd, offset + m.header_offset, local, sizeof(local), name);
  if (!got.ok()) return got.status();
  if (*got != sizeof(local) || LoadLe32(local) != 0x04034b50) return Bad(what, "a damaged local header");
  const uint64_t data = m.header_offset + 30 + LoadLe16(local + 26) + LoadLe16(local + 28);
  if (data > length || m.compressed > length - data) return Bad(what, "its data runs past the file");
  // The npy header (at most 1 MiB) and the array, as stored.
  const uint64_t most = limits.max_bytes + (uint64_t{1} << 20);
  if (m.size > most) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", m.size, " bytes, over the daemon's volume limits (", limits.max_bytes, ")"));
  }
  if (m.method == 0) {
    if (m.size != m.compressed) return Bad(what, "a stored member whose two sizes differ");
    return ReadNpy(fd, offset + data, m.size, what, limits, spacing);
  }
  if (m.compressed > most) return absl::ResourceExhaustedError(what + ": over the limits");
  std::vector<uint8_t> packed(m.compressed);
  got = ReadFullyAt(fd, offset + data, packed.data(), packed.size(), name);
  if (!got.ok()) return got.status();
  if (*got != packed.size()) return Bad(what, "the file ends within the member");
  std::vector<uint8_t> plain;
  if (absl::Status s = Inflate(packed, &plain, m.size, what); !s.ok()) return s;
  return ReadNpyBytes(plain.data(), plain.size(), what, limits, spacing);
}

}  // namespace

absl::StatusOr<Volume> ReadNpz(int fd, uint64_t offset, uint64_t length, const std::string& name,
                               const VolumeLimits& limits, const std::vector<std::string>& keys,
                               const std::array<double, 3>& spacing) {
  absl::StatusOr<uint64_t> resolved = RangeLength(fd, offset, length, name);
  if (!resolved.ok()) return resolved.status();
  length = *resolved;
  absl::StatusOr<std::vector<Member>> members = ListMembers(fd, offset, length, name);
  if (!members.ok()) return members.status();
  std::vector<const Member*> chosen;
  if (keys.empty()) {
    for (const Member& m : *members) chosen.push_back(&m);
  } else {
    for (const std::string& key : keys) {
      auto it = std::find_if(members->begin(), members->end(), [&](const Member& m) {
        return m.name == key + ".npy" || m.name == key;
      });
      if (it == members->end()) {
        std::string names;
        for (const Member& m : *members) {
          absl::StrAppend(&names, names.empty() ? "" : ", ",
                          m.name.size() > 4 && m.name.substr(m.name.size() - 4) == ".npy"
                              ? m.name.substr(0, m.name.size() - 4)
                              : m.name);
        }
        return absl::NotFoundError(absl::StrCat(name, ": no array '", key, "' (it holds ",
                                                names.empty() ? "none" : names, ")"));
      }
      chosen.push_back(&*it);
    }
  }
  if (chosen.empty()) return Bad(name, "an archive with no array");
  Volume out;
  for (size_t k = 0; k < chosen.size(); ++k) {
    absl::StatusOr<Volume> v = ReadMember(fd, offset, length, *chosen[k], name, limits, spacing);
    if (!v.ok()) return v.status();
    if (k == 0) {
      out = *std::move(v);
      continue;
    }
    if (absl::Status s =
            AppendChannels(&out, *std::move(v), limits, name, chosen[0]->name, chosen[k]->name);
        !s.ok()) {
      return s;
    }
  }
  return out;
}

}  // namespace stoker::volume
