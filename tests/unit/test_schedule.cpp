// Schedule values: string form, presets, validation against ops, enumeration.
#include <gtest/gtest.h>

#include "cofuse/backend.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {
namespace {

OpDesc op(OpKind kind, Axis axis) { return OpDesc{kind, 8, 8, 8, DType::f32, false, false, axis, 2}; }

std::string parse_error(const std::string& text) {
  Status error;
  EXPECT_FALSE(Schedule::parse(text, &error)) << text;
  return error.message();
}

TEST(ScheduleString, RoundTripsEveryEnumeratedSchedule) {
  for (OpDesc d : {op(OpKind::ag_gemm, Axis::m), op(OpKind::gemm_rs, Axis::n), op(OpKind::gemm_ar, Axis::none)})
    for (const Schedule& s : enumerate_schedules(d, {1, 3, 8})) {
      const auto back = Schedule::parse(s.to_string());
      ASSERT_TRUE(back) << s.to_string();
      EXPECT_EQ(*back, s) << s.to_string();
    }
}

TEST(ScheduleString, TheDocumentedExample) {
  const std::string text = "overlap=chunk,chunks=4,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring";
  const auto s = Schedule::parse(text);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->to_string(), text);
  EXPECT_EQ(s->overlap, Overlap::chunk);
  EXPECT_EQ(s->algo, Algo::ring);
}

TEST(ScheduleString, DriverIsTheEngineKeysSynonym) {
  // The C++ field is Schedule::driver; its text key stays `engine` (printed), `driver` parses too.
  const Schedule s = *Schedule::parse("hetero-unfused-1d,driver=ce");
  EXPECT_EQ(s.driver, CommDriver::ce);
  EXPECT_EQ(s, *Schedule::parse("hetero-unfused-1d,engine=ce"));
  EXPECT_NE(s.to_string().find(",engine=ce,"), std::string::npos) << s.to_string();
  EXPECT_NE(parse_error("engine=thread,driver=thread").find("given twice"), std::string::npos);
}

TEST(ScheduleString, PresetsAreAliasesAndTakeOverrides) {
  for (const char* name : {"serial", "shard", "uniform-fused-1d", "hetero-unfused-1d", "hetero-fused-1d", "uniform-fused-2d"})
    EXPECT_TRUE(Schedule::parse(name)) << name;
  EXPECT_EQ(*Schedule::parse("serial"), serial_schedule());
  const Schedule s = *Schedule::parse("hetero-unfused-1d,chunks=8,algo=direct");
  EXPECT_EQ(s.chunks, 8);
  EXPECT_EQ(s.algo, Algo::direct);
  EXPECT_EQ(s.data, DataMode::hetero);
  EXPECT_EQ(*Schedule::parse("uniform-fused-2d"),
            *Schedule::parse("overlap=chunk,chunks=4,split=2d,data=uniform,fusion=fused,engine=inline,algo=ring"));
  // Missing keys take the baseline's values.
  EXPECT_EQ(Schedule::parse("overlap=chunk")->chunks, 1);
}

// The text echoed in a refusal has its control bytes escaped: one line, the stray byte shown.
TEST(ScheduleString, RefusalsEscapeControlBytes) {
  EXPECT_NE(parse_error("shard\r").find("schedule 'shard\\r': unknown preset 'shard\\r'"), std::string::npos);
  EXPECT_NE(parse_error("shard,overlap=chunk\n").find("overlap=chunk\\n is not one of"), std::string::npos);
  EXPECT_NE(parse_error("shard,x\x01=1").find("unknown key 'x\\x01'"), std::string::npos);
  EXPECT_NE(parse_error("a\\b").find("'a\\\\b'"), std::string::npos);  // a backslash is doubled
}

TEST(ScheduleString, MalformedInputNamesTheToken) {
  EXPECT_NE(parse_error("").find("empty"), std::string::npos);
  EXPECT_NE(parse_error("overlap=lots").find("overlap=lots is not one of none | shard | chunk"), std::string::npos);
  EXPECT_NE(parse_error("chunks=0").find("chunks=0 is not an integer in 1..65536"), std::string::npos);
  EXPECT_NE(parse_error("chunks=4x").find("chunks=4x"), std::string::npos);
  EXPECT_NE(parse_error("chunks=99999999999").find("chunks="), std::string::npos);
  EXPECT_NE(parse_error("colour=red").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(parse_error("algo=ring,algo=direct").find("'algo' given twice"), std::string::npos);
  EXPECT_NE(parse_error("algo=ring,").find("empty field"), std::string::npos);
  EXPECT_NE(parse_error("algo=ring,serial").find("a preset name may only come first"), std::string::npos);
  EXPECT_NE(parse_error("fastest").find("unknown preset 'fastest'"), std::string::npos);
  EXPECT_NE(parse_error("engine=gpu").find("thread | inline | ce | sm"), std::string::npos);
}

TEST(ScheduleValidate, RejectsMeaninglessCombinationsWithAReason) {
  const OpDesc ag = op(OpKind::ag_gemm, Axis::m), ar = op(OpKind::gemm_ar, Axis::none);
  auto why = [](const OpDesc& d, const std::string& text) { return Schedule::parse(text)->validate_for(d).message(); };
  EXPECT_TRUE(serial_schedule().validate_for(ag).ok());
  EXPECT_NE(why(ag, "overlap=none,chunks=4").find("overlap=none is the unfused baseline"), std::string::npos);
  EXPECT_NE(why(ag, "overlap=none,fusion=fused,engine=inline").find("varies only in algo"), std::string::npos);
  EXPECT_NE(why(ag, "overlap=none,data=uniform").find("preset 'serial'"), std::string::npos);
  EXPECT_NE(why(ag, "serial-ring,chunks=2").find("preset 'serial-ring'"), std::string::npos);
  EXPECT_TRUE(Schedule::parse("serial-ring")->validate_for(ag).ok());
  EXPECT_TRUE(Schedule::parse("serial,algo=direct")->validate_for(ar).ok());
  EXPECT_EQ(schedule_name(*Schedule::parse("overlap=none,algo=ring")), "serial-ring");
  EXPECT_NE(why(ag, "overlap=chunk,chunks=1,algo=coll").find("use overlap=none"), std::string::npos);
  EXPECT_NE(why(ag, "overlap=shard,chunks=4,algo=ring").find("chunks must be 1"), std::string::npos);
  EXPECT_NE(why(ag, "overlap=shard,algo=coll").find("algo must be ring or direct"), std::string::npos);
  EXPECT_NE(why(ag, "overlap=chunk,chunks=2,fusion=fused,engine=thread").find("engine must be inline"),
            std::string::npos);
  EXPECT_NE(why(ag, "overlap=chunk,chunks=2,engine=inline").find("that is fusion=fused"), std::string::npos);
  // What MPI cannot reduce is a backend's rule (can_run, test_can_run.cpp), not the schedule's.
  EXPECT_TRUE(Schedule::parse("overlap=chunk,chunks=4,split=2d,data=hetero,algo=coll")->validate_for(ar).ok());
  EXPECT_TRUE(Schedule::parse("overlap=chunk,chunks=4,split=2d,data=hetero,algo=coll")->validate_for(ag).ok());
  EXPECT_TRUE(Schedule::parse("overlap=chunk,chunks=4,split=2d,data=uniform,algo=coll")->validate_for(ar).ok());
  EXPECT_NE(why(ag, "overlap=shard,algo=coll").find("for ag_gemm: "), std::string::npos)
      << "messages name the op";
}

TEST(ScheduleTopo, StringFormValidationAndNames) {
  // Flat schedules print as before topo existed; two-level ones add topo (and host_ranks once known).
  EXPECT_EQ(serial_schedule().to_string().find("topo"), std::string::npos);
  const Schedule machine = *Schedule::parse("hetero-unfused-1d,topo=2level");
  EXPECT_EQ(machine.topo, Topo::two_level);
  EXPECT_EQ(machine.host_ranks, 0);
  EXPECT_EQ(machine.to_string(), "overlap=chunk,chunks=4,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring,topo=2level");
  const Schedule given = *Schedule::parse("hetero-unfused-1d,topo=2level,host_ranks=4");
  EXPECT_EQ(*Schedule::parse(given.to_string()), given);
  EXPECT_EQ(*Schedule::parse("hetero-unfused-1d,topo=flat"), *Schedule::parse("hetero-unfused-1d"));
  EXPECT_EQ(schedule_name(given), "hetero-unfused-1d,topo=2level,host_ranks=4");
  EXPECT_EQ(*Schedule::parse(schedule_name(given)), given);
  EXPECT_EQ(schedule_name(*Schedule::parse("serial-ring,topo=2level")), "serial-ring,topo=2level");
  // with_host_ranks fills in the machine's only where the schedule leaves it open.
  EXPECT_EQ(with_host_ranks(machine, 8).host_ranks, 8);
  EXPECT_EQ(with_host_ranks(given, 8).host_ranks, 4);
  EXPECT_EQ(with_host_ranks(serial_schedule(), 8), serial_schedule());

  EXPECT_NE(parse_error("topo=3level").find("topo=3level is not one of flat | 2level"), std::string::npos);
  EXPECT_NE(parse_error("topo=2level,host_ranks=-1").find("host_ranks=-1 is not an integer"), std::string::npos);
  EXPECT_NE(parse_error("topo=2level,host_ranks=two").find("host_ranks=two"), std::string::npos);

  const OpDesc rs{OpKind::gemm_rs, 12, 8, 12, DType::f32, false, false, Axis::m, 6};
  auto why = [&](const std::string& text) { return Schedule::parse(text)->validate_for(rs).message(); };
  EXPECT_TRUE(machine.validate_for(rs).ok()) << "the machine's hosts are a valid choice; lower() needs the number";
  EXPECT_TRUE(Schedule::parse("shard,topo=2level,host_ranks=3")->validate_for(rs).ok());
  EXPECT_TRUE(Schedule::parse("serial-ring,topo=2level,host_ranks=2")->validate_for(rs).ok());
  EXPECT_NE(why("shard,topo=2level,host_ranks=4").find("host_ranks=4 does not divide ranks=6 (6 % 4 = 2)"), std::string::npos);
  EXPECT_NE(why("shard,algo=direct,topo=2level,host_ranks=3").find("algo must be ring"), std::string::npos);
  EXPECT_NE(why("overlap=chunk,chunks=2,algo=coll,topo=2level").find("algo must be ring"), std::string::npos);
  EXPECT_NE(why("shard,host_ranks=3").find("it needs topo=2level"), std::string::npos);
  EXPECT_NE(why("serial,topo=2level").find("algo must be ring"), std::string::npos);
  // A plan needs the number.
  try {
    lower(rs, machine, 0);
    ADD_FAILURE() << "lower() of a two-level schedule without its hosts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host_ranks=0"), std::string::npos) << e.what();
  }
}


TEST(ScheduleWire, StringFormValidationNamesAndWireBytes) {
  EXPECT_EQ(serial_schedule().to_string().find("wire"), std::string::npos) << "wire=op prints nothing";
  const Schedule wide = *Schedule::parse("hetero-unfused-1d,topo=2level,host_ranks=2,wire=f32");
  EXPECT_EQ(wide.wire, Wire::f32);
  EXPECT_EQ(*Schedule::parse(wide.to_string()), wide);
  EXPECT_EQ(schedule_name(wide), "hetero-unfused-1d,topo=2level,host_ranks=2,wire=f32");
  EXPECT_EQ(*Schedule::parse(schedule_name(wide)), wide);
  EXPECT_EQ(schedule_name(*Schedule::parse("serial,wire=f32")), "serial,wire=f32");
  EXPECT_EQ(*Schedule::parse("shard,wire=op"), *Schedule::parse("shard"));
  EXPECT_NE(parse_error("shard,wire=f16").find("wire=f16 is not one of op | f32"), std::string::npos);

  const OpDesc ar{OpKind::gemm_ar, 12, 8, 12, DType::bf16, false, false, Axis::none, 2};
  EXPECT_TRUE(wide.validate_for(ar).ok()) << wide.validate_for(ar).message();
  EXPECT_TRUE(Schedule::parse("serial,wire=f32")->validate_for(ar).ok()) << "the baseline carries a wire too";
  OpDesc f32 = ar;
  f32.dtype = DType::f32;
  EXPECT_NE(Schedule::parse("shard,wire=f32")->validate_for(f32).message().find("a f32 op's partial sums travel in f32"),
            std::string::npos);
  f32.dtype = DType::f16;  // the CUDA executor's, which keeps partial sums in the op's dtype
  EXPECT_NE(Schedule::parse("shard,wire=f32")->validate_for(f32).message().find("bf16 op"), std::string::npos);
  OpDesc ag = ar;
  ag.op = OpKind::ag_gemm;
  ag.axis = Axis::m;
  EXPECT_NE(Schedule::parse("shard,wire=f32")->validate_for(ag).message().find("ag_gemm moves its inputs"),
            std::string::npos);
  EXPECT_NE(can_run(Backend::cuda_local, ar, *Schedule::parse("shard,engine=ce,wire=f32")).message().find("CPU executor"),
            std::string::npos);

  // The plan says what travels: the same messages, twice the bytes, and a wide workspace of f32.
  const Plan op_plan = lower(ar, *Schedule::parse("shard"), 0), f32_plan = lower(ar, *Schedule::parse("shard,wire=f32"), 0);
  int64_t op_bytes = 0, f32_bytes = 0;
  for (const Task& t : op_plan.tasks) op_bytes += t.kind == TaskKind::send && t.label.find("sum") == std::string::npos ? t.bytes : 0;
  for (const Task& t : f32_plan.tasks) f32_bytes += t.kind == TaskKind::send && t.label.find("sum") == std::string::npos ? t.bytes : 0;
  EXPECT_GT(op_bytes, 0);
  EXPECT_EQ(f32_bytes, 2 * op_bytes) << f32_plan.dump();
  EXPECT_EQ(op_plan.wide_elements, 0);
  EXPECT_GT(f32_plan.wide_elements, 0);
  EXPECT_EQ(f32_plan.workspace_bytes(), f32_plan.wide_offset_bytes() + f32_plan.wide_elements * 4);
  EXPECT_NE(f32_plan.dump().find("round sum"), std::string::npos) << f32_plan.dump();
}
TEST(ScheduleEnumerate, TwoLevelTwinsFollowTheirFlatRingSchedules) {
  const OpDesc d{OpKind::gemm_ar, 12, 8, 12, DType::f32, false, false, Axis::none, 4};
  const auto flat = enumerate_schedules(d, {2, 4});
  for (int R : {0, 1, 4, 3}) EXPECT_EQ(enumerate_schedules(d, {2, 4}, R), flat) << "no two-level twins for hosts of " << R;
  const auto hosts = enumerate_schedules(d, {2, 4}, 2);
  std::size_t rings = 0, twins = 0;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i].topo == Topo::flat) {
      rings += hosts[i].algo == Algo::ring;
      continue;
    }
    ++twins;
    ASSERT_GT(i, 0u);
    Schedule twin_of = hosts[i];
    twin_of.topo = Topo::flat;
    twin_of.host_ranks = 0;
    EXPECT_EQ(hosts[i - 1], twin_of) << "a twin follows its flat schedule";
    EXPECT_EQ(hosts[i].host_ranks, 2);
  }
  EXPECT_EQ(rings, twins);
  EXPECT_EQ(hosts.size(), flat.size() + twins);
}

TEST(ScheduleEnumerate, SerialFirstAllValidNoDuplicates) {
  for (OpDesc d : {op(OpKind::ag_gemm, Axis::k), op(OpKind::gemm_rs, Axis::m), op(OpKind::gemm_ar, Axis::none)}) {
    const auto all = enumerate_schedules(d);
    ASSERT_FALSE(all.empty());
    EXPECT_EQ(all.front(), serial_schedule());
    for (std::size_t i = 0; i < all.size(); ++i) {
      EXPECT_TRUE(all[i].validate_for(d).ok()) << all[i].to_string();
      for (std::size_t j = i + 1; j < all.size(); ++j) EXPECT_NE(all[i], all[j]);
    }
    EXPECT_GT(all.size(), 40u);
  }
}

}  // namespace
}  // namespace cofuse
