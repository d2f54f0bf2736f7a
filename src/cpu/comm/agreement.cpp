#include "cpu/comm/agreement.hpp"

#include <map>
#include <sstream>

#include "cofuse/status.hpp"
#include "cpu/comm/mpi_util.hpp"

namespace cofuse::detail {

namespace {

uint64_t digest(const std::vector<AgreedField>& fields) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](uint64_t word) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (word >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  mix(fields.size());
  for (const auto& field : fields) mix(static_cast<uint64_t>(field.value));
  return hash;
}

}  // namespace

std::string format_ranks(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out << ",";
    out << ranks[i];
    if (j > i) out << "-" << ranks[j];
    i = j + 1;
  }
  return out.str();
}

void agree_fields(MPI_Comm comm, const std::string& what, const std::vector<AgreedField>& fields,
                  const Status& failure) {
  // min == max over ranks  <=>  max(h) == ~max(~h): one MAX allreduce answers both, and the
  // third word names the highest failing rank (+1; 0 = none).
  const uint64_t h = digest(fields);
  const uint64_t failed = failure.ok() ? 0 : static_cast<uint64_t>(comm_rank(comm)) + 1;
  uint64_t words[3] = {h, ~h, failed};
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, words, 3, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce (agreement)");
  if (words[2] > 0) {
    const int root = static_cast<int>(words[2] - 1);
    int code = static_cast<int>(failure.code());
    mpi_check(MPI_Bcast(&code, 1, MPI_INT, root, comm), "MPI_Bcast (agreement)");
    const std::string message = broadcast_text(comm, failure.message(), root);
    throw Error(static_cast<ErrorCode>(code), "rank " + std::to_string(root) + ": " + message);
  }
  if (words[0] == ~words[1]) return;

  // Someone differs: every rank gathers every field and builds the same message.
  const int size = comm_size(comm);
  const int count = static_cast<int>(fields.size());
  std::vector<int64_t> mine(count), all(static_cast<std::size_t>(count) * size);
  for (int i = 0; i < count; ++i) mine[i] = fields[i].value;
  mpi_check(MPI_Allgather(mine.data(), count, MPI_INT64_T, all.data(), count, MPI_INT64_T, comm),
            "MPI_Allgather (agreement)");

  std::ostringstream msg;
  msg << what << ": ranks disagree about the operation:";
  bool first = true;
  for (int i = 0; i < count; ++i) {
    std::map<int64_t, std::vector<int>> holders;
    for (int r = 0; r < size; ++r) holders[all[static_cast<std::size_t>(r) * count + i]].push_back(r);
    if (holders.size() < 2) continue;
    msg << (first ? " " : "; ") << fields[i].name << ":";
    first = false;
    bool first_value = true;
    for (const auto& [value, ranks] : holders) {
      msg << (first_value ? " " : ", ") << (fields[i].show ? fields[i].show(value) : std::to_string(value)) << " on " << format_ranks(ranks);
      first_value = false;
    }
  }
  throw Error(ErrorCode::mismatch, msg.str());
}

}  // namespace cofuse::detail
