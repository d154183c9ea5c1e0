#include "server/dataset/video_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>

#include "common/posix.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"

namespace stoker {
namespace {

using dataset_internal::Cat;

constexpr char kMagic[8] = {'S', 'T', 'K', 'V', 'I', 'D', '1', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxWarned = 10;  // failed videos named in warnings, then counted

// What a video's file looked like when it was indexed.
struct FileId {
  std::string path;
  uint64_t offset = 0, length = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;
  auto key() const { return std::tie(path, offset, length); }
  bool Same(const FileId& o) const {
    return ino != 0 && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
};

struct Record {
  FileId id;
  ProbeOutcome outcome;
};

FileId Identify(const DataRoot& root, const ProbeTarget& t) {
  FileId id;
  id.path = t.path;
  id.offset = t.has_range ? t.offset : 0;
  id.length = t.has_range ? t.length : 0;
  struct stat st;
  if (::fstatat(root.fd(), t.path.c_str(), &st, 0) == 0 && S_ISREG(st.st_mode)) {
    id.ino = static_cast<uint64_t>(st.st_ino);
    id.size = static_cast<uint64_t>(st.st_size);
    id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  return id;
}

// A probe that crashed or timed out says nothing lasting about the file.
bool Lasting(const absl::Status& s) {
  return s.code() != absl::StatusCode::kAborted &&
         s.code() != absl::StatusCode::kDeadlineExceeded &&
         s.code() != absl::StatusCode::kUnavailable;
}

class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void PutString(const std::string& s) {
    Put(static_cast<uint32_t>(s.size()));
    out.append(s);
  }
  void PutArray(const std::vector<int64_t>& a) {
    Put(static_cast<uint64_t>(a.size()));
    if (!a.empty()) out.append(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(int64_t));
  }
  std::string out;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() - at_ < sizeof(T)) return false;
    std::memcpy(v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || in_.size() - at_ < n) return false;
    s->assign(in_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool GetArray(std::vector<int64_t>* a) {
    uint64_t n;
    if (!Get(&n) || (in_.size() - at_) / sizeof(int64_t) < n) return false;
    a->resize(n);
    if (n != 0) std::memcpy(a->data(), in_.data() + at_, n * sizeof(int64_t));
    at_ += n * sizeof(int64_t);
    return true;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  const std::string& in_;
  size_t at_ = 0;
};

std::string Serialize(const std::vector<Record>& records) {
  Writer w;
  w.out.append(kMagic, sizeof(kMagic));
  w.Put(kVersion);
  w.Put(static_cast<uint64_t>(records.size()));
  for (const Record& r : records) {
    w.PutString(r.id.path);
    w.Put(r.id.offset);
    w.Put(r.id.length);
    w.Put(r.id.ino);
    w.Put(r.id.size);
    w.Put(r.id.mtime_ns);
    w.Put(static_cast<uint32_t>(r.outcome.status.code()));
    w.PutString(std::string(r.outcome.status.message()));
    w.PutString(r.outcome.warning);
    w.Put(r.outcome.info);
    w.PutArray(r.outcome.pts);
    w.PutArray(r.outcome.keyframes);
  }
  return std::move(w.out);
}

// The records of a cache file; empty when it is missing, damaged or from
// another version.
std::vector<Record> Parse(const std::string& bytes) {
  std::vector<Record> records;
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return records;
  }
  const std::string body = bytes.substr(sizeof(kMagic));
  Reader r(body);
  uint32_t version;
  uint64_t count;
  if (!r.Get(&version) || version != kVersion || !r.Get(&count)) return records;
  for (uint64_t k = 0; k < count; ++k) {
    Record rec;
    uint32_t code;
    std::string message;
    if (!r.GetString(&rec.id.path) || !r.Get(&rec.id.offset) || !r.Get(&rec.id.length) ||
        !r.Get(&rec.id.ino) || !r.Get(&rec.id.size) || !r.Get(&rec.id.mtime_ns) || !r.Get(&code) ||
        !r.GetString(&message) || !r.GetString(&rec.outcome.warning) ||
        !r.Get(&rec.outcome.info) || !r.GetArray(&rec.outcome.pts) ||
        !r.GetArray(&rec.outcome.keyframes) || code > 16) {
      return {};
    }
    rec.outcome.status = absl::Status(static_cast<absl::StatusCode>(code), message);
    records.push_back(std::move(rec));
  }
  if (!r.done()) return {};
  return records;
}

bool ReadFile(const std::string& file, std::string* out) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
  }
}

// Writes `bytes` to `file` atomically (a temporary, then rename); the
// error as text, "" on success.
std::string WriteFile(const std::string& file, const std::string& bytes) {
  const std::string tmp = Cat(file, ".tmp.", ::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return Cat("open ", tmp, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = Cat("write ", tmp, ": ", std::strerror(errno));
      ::unlink(tmp.c_str());
      return why;
    }
    done += static_cast<size_t>(n);
  }
  fd.Reset();
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const std::string why = Cat("rename to ", file, ": ", std::strerror(errno));
    ::unlink(tmp.c_str());
    return why;
  }
  return "";
}

}  // namespace

std::shared_ptr<const VideoTable> VideoTable::Build(const DataRoot& root, const Dataset& dataset,
                                                    VideoProber& prober,
                                                    const std::string& cache_dir,
                                                    const std::function<void(uint64_t)>& progress) {
  std::shared_ptr<VideoTable> t(new VideoTable());
  const uint64_t n = dataset.size();
  std::vector<ProbeTarget> targets(n);
  std::vector<FileId> ids(n);
  for (uint64_t v = 0; v < n; ++v) {
    ProbeTarget& pt = targets[v];
    pt.path = std::string(dataset.path(v));
    pt.has_range = dataset.has_range(v);
    pt.offset = dataset.range_offset(v);
    pt.length = dataset.range_length(v);
    pt.display = dataset.display(v);
    ids[v] = Identify(root, pt);
  }
  std::string file;
  if (!cache_dir.empty()) {
    file = dataset_internal::CachePath(cache_dir, root.path(), Cat(dataset.name(), "\nvideos"),
                                       static_cast<int>(dataset.format()), 0);
    file += ".videos";
  }
  std::vector<Record> old;
  if (!file.empty()) {
    std::string bytes;
    if (ReadFile(file, &bytes)) old = Parse(bytes);
  }
  std::map<std::tuple<const std::string&, const uint64_t&, const uint64_t&>, size_t> by_key;
  for (size_t k = 0; k < old.size(); ++k) by_key.emplace(old[k].id.key(), k);

  std::vector<Record> records(n);
  std::vector<ProbeTarget> to_probe;
  std::vector<uint64_t> probed_of;
  for (uint64_t v = 0; v < n; ++v) {
    records[v].id = ids[v];
    auto it = by_key.find(ids[v].key());
    if (it != by_key.end() && old[it->second].id.Same(ids[v]) &&
        Lasting(old[it->second].outcome.status)) {
      records[v].outcome = std::move(old[it->second].outcome);
      ++t->reused_;
      continue;
    }
    to_probe.push_back(targets[v]);
    probed_of.push_back(v);
  }
  if (!to_probe.empty()) {
    std::vector<ProbeOutcome> got = prober.ProbeAll(to_probe, progress);
    for (size_t k = 0; k < probed_of.size(); ++k) {
      if (k < got.size()) {
        records[probed_of[k]].outcome = std::move(got[k]);
      } else {
        records[probed_of[k]].outcome.status = absl::UnavailableError("not probed");
      }
    }
    t->probed_ = to_probe.size();
  }

  t->info_.reserve(n);
  t->failure_.reserve(n);
  uint64_t warned_stopped = 0;
  for (uint64_t v = 0; v < n; ++v) {
    ProbeOutcome& o = records[v].outcome;
    t->info_.push_back(o.info);
    if (o.status.ok()) {
      t->failure_.emplace_back();
      t->pts_.insert(t->pts_.end(), o.pts.begin(), o.pts.end());
      t->keys_.insert(t->keys_.end(), o.keyframes.begin(), o.keyframes.end());
      if (!o.warning.empty() && warned_stopped++ < kMaxWarned) {
        t->warnings_.push_back(Cat(targets[v].display, ": ", o.warning));
      }
    } else {
      t->failure_.push_back(std::string(o.status.message()));
      if (t->failed_++ < kMaxWarned) {
        t->warnings_.push_back(Cat(targets[v].display, ": no clip (", o.status.ToString(), ")"));
      }
    }
    t->pts_offsets_.push_back(t->pts_.size());
    t->key_offsets_.push_back(t->keys_.size());
  }
  if (t->failed_ > kMaxWarned) {
    t->warnings_.push_back(Cat(t->failed_ - kMaxWarned, " more videos could not be indexed"));
  }
  if (!file.empty() && t->probed_ != 0) {
    const std::string why = WriteFile(file, Serialize(records));
    if (!why.empty()) t->warnings_.push_back(Cat("the video index cache was not written: ", why));
  }
  return t;
}

uint64_t VideoTable::memory_bytes() const {
  uint64_t bytes = info_.capacity() * sizeof(VideoInfo) + pts_.capacity() * sizeof(int64_t) +
                   keys_.capacity() * sizeof(int64_t) +
                   (pts_offsets_.capacity() + key_offsets_.capacity()) * sizeof(uint64_t);
  for (const std::string& f : failure_) bytes += sizeof(f) + f.capacity();
  return bytes;
}

absl::StatusOr<RecordIndex> VideoProber::IndexRecords(const RecordTarget& target) {
  ProbeTarget t;
  t.record_kind = static_cast<uint32_t>(target.kind);
  for (const std::string* part :
       {&target.file, &target.images_key, &target.labels_file, &target.labels_key}) {
    if (part->find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("a record file's names may not hold NUL");
    }
    t.path.append(*part);
    t.path.push_back('\0');
  }
  t.path += std::to_string(target.height) + "," + std::to_string(target.width) + "," +
            std::to_string(target.channels);
  t.path.push_back('\0');
  t.display = target.file;
  std::vector<ProbeOutcome> out = ProbeAll({t}, nullptr);
  if (out.size() != 1) return absl::InternalError("the record file was not indexed");
  ProbeOutcome& o = out[0];
  if (!o.status.ok()) return o.status;
  // What a worker says is checked as any input is: the ranges are checked
  // again against the file when read.
  const std::vector<int64_t>& v = o.pts;
  if (v.size() % 4 != 0 || v.size() / 4 > kMaxRecords ||
      (o.record_channels != 0 && o.record_channels != 1 && o.record_channels != 3)) {
    return absl::InternalError("the worker indexing the record file answered out of protocol");
  }
  RecordIndex index;
  index.height = o.record_height;
  index.width = o.record_width;
  index.channels = o.record_channels;
  index.warning = std::move(o.warning);
  const size_t n = v.size() / 4;
  index.offsets.resize(n);
  index.lengths.resize(n);
  index.labels.resize(n);
  index.rows.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (v[4 * i] < 0 || v[4 * i + 1] <= 0 || v[4 * i + 3] < 0) {
      return absl::InternalError("the worker indexing the record file gave a bad range");
    }
    index.offsets[i] = static_cast<uint64_t>(v[4 * i]);
    index.lengths[i] = static_cast<uint64_t>(v[4 * i + 1]);
    index.labels[i] = v[4 * i + 2];
    index.rows[i] = static_cast<uint64_t>(v[4 * i + 3]);
  }
  return index;
}

}  // namespace stoker
