// SlurmJobs against small stand-in scripts for sbatch, squeue and scancel
// (COLLAGE_SBATCH & co. point the product at tests/e2e/slurm_standin/ the
// same way): the command lines it passes, the job id it reads, how squeue's
// lines are read, and the messages when a command fails.
#include "core/measure/slurm_jobs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/ir/error.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

class SlurmJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("collage_slurm_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An executable shell script in the test's folder.
  std::string script(const std::string& name, const std::string& body) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  }
  std::string read(const std::string& name) {
    std::ifstream in(dir_ / name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST_F(SlurmJobsTest, SubmitsAnArrayWithTheConstraintAndReadsTheJobId) {
  SlurmCommands c;
  c.sbatch =
      script("sbatch", "echo \"$@\" > " + (dir_ / "args").string() + "\necho \"$COLLAGE_X\" > " +
                           (dir_ / "env").string() + "\necho '4242;cluster'");
  SlurmArrayRequest r;
  r.script = "/shared/job.sh";
  r.tasks = 3;
  r.constraint = "gpu-a100";
  r.jobName = "collage-measure";
  r.output = "/shared/task-%a.log";
  r.environment = {{"COLLAGE_X", "postgresql://u:s%40cr%2Fet%3F@db/collage"}};
  EXPECT_EQ(SlurmJobs(c).submitArray(r), "4242");
  const std::string args = read("args");
  EXPECT_NE(args.find("--parsable --array=0-2 --constraint=gpu-a100 --exclusive"),
            std::string::npos)
      << args;
  EXPECT_NE(args.find("--output=/shared/task-%a.log"), std::string::npos) << args;
  EXPECT_NE(args.find("/shared/job.sh"), std::string::npos) << args;
  // The URL travels in the environment, not on the command line, and
  // without its password (the tasks read it by libpq's means).
  EXPECT_EQ(args.find("s%40cr"), std::string::npos);
  EXPECT_EQ(read("env"), "postgresql://u@db/collage\n");
}

TEST_F(SlurmJobsTest, ASubmissionSlurmRefusesIsAnErrorWithItsMessage) {
  SlurmCommands c;
  c.sbatch = script("sbatch",
                    "echo 'sbatch: error: Batch job submission failed: Invalid feature "
                    "specification' >&2\nexit 1");
  SlurmArrayRequest r;
  r.script = "job.sh";
  r.tasks = 1;
  r.constraint = "nosuch";
  try {
    SlurmJobs(c).submitArray(r);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Invalid feature specification"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--constraint=nosuch"), std::string::npos) << e.what();
  }
  c.sbatch = (dir_ / "no-such-sbatch").string();
  EXPECT_THROW(SlurmJobs(c).submitArray(r), Error);
}

TEST_F(SlurmJobsTest, ReadsSqueuesTasksAndPendingRanges) {
  SlurmCommands c;
  c.squeue =
      script("squeue", "printf '0 RUNNING node7\\n1 COMPLETING node8\\n[2-5%%2] PENDING \\n'");
  const SlurmJobState s = SlurmJobs(c).poll("77");
  EXPECT_TRUE(s.inQueue);
  EXPECT_EQ(s.running, 2);
  EXPECT_EQ(s.pending, 4);
  ASSERT_EQ(s.tasks.count(0), 1u);
  EXPECT_EQ(s.tasks.at(0).node, "node7");
  EXPECT_EQ(s.tasks.at(1).state, "COMPLETING");
  EXPECT_EQ(s.toString(), "2 running, 4 pending");
}

TEST_F(SlurmJobsTest, AJobThatLeftTheQueueIsNotInIt) {
  SlurmCommands c;
  c.squeue = script("squeue", "exit 0");
  EXPECT_FALSE(SlurmJobs(c).poll("77").inQueue);
  // Purged from the controller: Slurm calls the id invalid.
  c.squeue =
      script("squeue2", "echo 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1");
  EXPECT_FALSE(SlurmJobs(c).poll("77").inQueue);
  // Anything else is the cluster's problem, said as such.
  c.squeue = script("squeue3",
                    "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1");
  try {
    SlurmJobs(c).poll("77");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Slurm job 77"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Unable to contact"), std::string::npos) << e.what();
  }
}

TEST_F(SlurmJobsTest, CancelRunsScancelOnTheJob) {
  SlurmCommands c;
  c.scancel = script("scancel", "echo \"$@\" > " + (dir_ / "cancelled").string());
  SlurmJobs(c).cancel("4242");
  EXPECT_EQ(read("cancelled"), "4242\n");
  c.scancel =
      script("scancel2",
             "echo 'scancel: error: Kill job error on job id 4242: Access denied' >&2\nexit 1");
  EXPECT_THROW(SlurmJobs(c).cancel("4242"), Error);
}

}  // namespace
}  // namespace collage
