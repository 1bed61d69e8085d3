/* The node tier's pod sandbox ("pause") process: sleeps until SIGTERM/SIGINT and reaps every child it inherits
 * (PID namespace sharing). Built statically (gcc -static) into a one-layer OCI image by watchdog/demo/node/images.py. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction term = {0}, child = {0};
    term.sa_handler = stop;
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGINT, &term, NULL);
    child.sa_handler = reap;
    child.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &child, NULL);
    for (;;) pause();
    return 0;
}
