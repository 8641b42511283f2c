/*
 * The pod sandbox's pause process for the Headrace testbed node.
 *
 * Owns: holding a pod's namespaces open, reaping children that get re-parented to it (it is PID 1
 * when the pod shares its PID namespace) and exiting cleanly on SIGINT or SIGTERM.
 * Never: reads input, writes files or opens the network.
 *
 * Built statically (gcc -static) so the image needs nothing but this one file.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
    (void)signo;
    _exit(0);
}

static void on_child(int signo) {
    (void)signo;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int install(int signo, void (*handler)(int)) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = signo == SIGCHLD ? SA_NOCLDSTOP | SA_RESTART : 0;
    return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        printf("headrace-pause 1.0\n");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "headrace-pause: warning: not PID 1\n");
    }
    if (install(SIGINT, on_stop) < 0 || install(SIGTERM, on_stop) < 0 || install(SIGCHLD, on_child) < 0) {
        perror("headrace-pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
}
