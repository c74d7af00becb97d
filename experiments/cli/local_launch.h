// `jacond train --nproc N`: N ranks of one data-parallel run on this machine, started the way
// torchrun starts them (models/dist/process_group.h): each is this program with the same
// arguments and RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
// MASTER_PORT in its environment, plus JACOND_LOCAL_LAUNCH=1 so that it runs as a rank instead
// of launching again.
#pragma once

namespace jacond::cli {

/// The variable that marks a process started by launch_local_ranks.
inline constexpr const char* kLocalLaunchVariable = "JACOND_LOCAL_LAUNCH";

/// The most ranks launch_local_ranks starts (cmd_train refuses more: a usage error).
inline constexpr int kMaxLocalRanks = 1024;

/// Starts `nproc` ranks running `jacond <args...>` (args = the command and its arguments, as
/// run_train receives them) and waits for all of them. When one fails (non-zero exit or a
/// signal) the others are stopped with SIGTERM. Each rank's stderr goes to an unlinked temporary
/// file: the ranks of a failed run each print the error, so the launcher prints one line instead,
/// the last line of the first rank that failed with an error of its own (not a collective that
/// lost a peer), with "rank R: " after "jacond train: error: ", or that a rank was killed by signal
/// N; a run that succeeded passes rank 0's stderr on. Returns 0 when every rank succeeded, else
/// the first failure's exit code (1 for a signal).
///
/// Signals: SIGTERM, SIGINT or SIGHUP sent to the launcher alone (a supervisor signalling its main
/// pid) is passed on to the ranks (a second one sends SIGKILL), and the launcher returns 128 + the
/// signal unless a rank failed with an error of its own. Each rank has SIGTERM as its parent-death
/// signal, so a launcher killed outright takes its ranks with it: no orphan trains on and races a
/// later --resume. Tested by TrainDistCli.ATerminatedLauncherStopsItsRanks and
/// .AKilledLauncherTakesItsRanksWithIt.
int launch_local_ranks(int nproc, int argc, char** args);

}  // namespace jacond::cli
