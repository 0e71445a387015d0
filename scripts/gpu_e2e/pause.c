/* The pod sandbox's process for scripts/gpu-e2e.sh's images (no registry is reachable there for the pause image):
 * sleeps until SIGINT or SIGTERM, reaping children meanwhile, as a pod's infra container must. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  sigset_t set;
  int sig = 0;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  for (;;) {
    if (sigwait(&set, &sig) != 0) return 1;
    if (sig != SIGCHLD) return 0;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
  }
}
