// Placement of accepted connections on workers: the least loaded candidate, ties to the first.
#include "proxy/session/placement.h"

#include <vector>

#include <gtest/gtest.h>

namespace ferry::session {
namespace {

TEST(Placement, EqualLoadsStayOnTheFirstCandidate) {
  Placement p(4);
  // Connections that finish before the next arrives never leave the first candidate: a quiet
  // pair keeps its home worker (one tunnel), an accepted socket is not moved for nothing.
  for (int i = 0; i < 4; ++i) {
    LoadUnit unit = p.place(2, 4);
    EXPECT_EQ(unit.worker(), 2u);
  }
  for (size_t w = 0; w < 4; ++w) EXPECT_EQ(p.load(w), 0) << "worker " << w;
}

TEST(Placement, AnIdleControlConnectionThenFourStreamsSplitTwoAndTwo) {
  // iperf3 -P 4 between one pod pair: a control connection, then four data streams, all kept
  // open, candidates both workers from the pair's home.
  for (size_t home : {0u, 1u}) {
    Placement p(2);
    std::vector<LoadUnit> open;
    open.push_back(p.place(home, 2));
    EXPECT_EQ(open.back().worker(), home);
    int streams_on[2] = {0, 0};
    for (int i = 0; i < 4; ++i) {
      open.push_back(p.place(home, 2));
      ++streams_on[open.back().worker()];
    }
    EXPECT_EQ(streams_on[0], 2) << "home " << home;
    EXPECT_EQ(streams_on[1], 2) << "home " << home;
  }
}

TEST(Placement, ChoosesOnlyAmongTheCandidatesWrappingAround) {
  Placement p(4);
  std::vector<LoadUnit> open;
  // Candidates 3 and 0 (wrapping): six connections alternate between them, never 1 or 2.
  for (int i = 0; i < 6; ++i) {
    open.push_back(p.place(3, 2));
    EXPECT_TRUE(open.back().worker() == 3 || open.back().worker() == 0) << open.back().worker();
  }
  EXPECT_EQ(p.load(3), 3);
  EXPECT_EQ(p.load(0), 3);
  EXPECT_EQ(p.load(1), 0);
  EXPECT_EQ(p.load(2), 0);
  // More candidates than workers means every worker, once.
  open.push_back(p.place(0, 99));
  EXPECT_TRUE(open.back().worker() == 1u) << open.back().worker();
}

TEST(Placement, NewConnectionsAvoidAWorkerCarryingLongLivedLoad) {
  Placement p(3);
  for (int i = 0; i < 5; ++i) p.add(1);  // the streams of a busy tunnel on worker 1
  std::vector<LoadUnit> open;
  for (int i = 0; i < 10; ++i) {
    open.push_back(p.place(1, 3));
    EXPECT_NE(open.back().worker(), 1u) << "connection " << i;
  }
  EXPECT_EQ(p.load(0), 5);
  EXPECT_EQ(p.load(2), 5);
  // All equal again: the first candidate.
  open.push_back(p.place(1, 3));
  EXPECT_EQ(open.back().worker(), 1u);
}

TEST(LoadUnit, ReleasesOnceWhenMovedAndWhenReplaced) {
  Placement p(2);
  {
    LoadUnit a = LoadUnit::add(p, 1);
    EXPECT_EQ(p.load(1), 1);
    LoadUnit b(std::move(a));
    EXPECT_EQ(p.load(1), 1);
    // Replacing a unit releases the one it held (a failed hand-over moves the load back).
    b = LoadUnit::add(p, 0);
    EXPECT_EQ(p.load(1), 0);
    EXPECT_EQ(p.load(0), 1);
  }
  EXPECT_EQ(p.load(0), 0);
  EXPECT_EQ(p.load(1), 0);
}

TEST(Placement, ZeroWorkersMeansOne) {
  Placement p(0);
  EXPECT_EQ(p.workers(), 1u);
  EXPECT_EQ(p.place(5, 0).worker(), 0u);
}

}  // namespace
}  // namespace ferry::session
