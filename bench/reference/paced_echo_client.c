// The least a paced echo client can cost on this kernel: the reference beside
// bench/paced_load.py, as ../shared/reference/limit_client.c is beside the HTTP benchmarks.
//
// CONNS connections to an echo server on 127.0.0.1:PORT, TCP_NODELAY, one epoll, one thread,
// MSGLEN-byte messages, one outstanding per connection. RATE 0 floods: each connection sends its
// next message when the echo of the last is back. RATE > 0 paces: a 10 ms timerfd tick (the tick
// sockscale's -r uses) hands out RATE/100 sends to idle connections in turn, so most connections
// wait, as the seed's rate-limited clients did. No verification, no latency histogram, no
// timers per connection: whatever this costs per message is the kernel's price (send, the
// echo's wake-up, recv), not a load generator's.
//
// usage: paced_echo_client PORT CONNS SECONDS MSGLEN RATE  -> "messages N"
// Build: gcc -O2 -o paced_echo_client paced_echo_client.c
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s PORT CONNS SECONDS MSGLEN RATE\n", argv[0]);
    return 2;
  }
  int port = atoi(argv[1]), conns = atoi(argv[2]), len = atoi(argv[4]);
  double secs = atof(argv[3]), rate = atof(argv[5]);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
  int ep = epoll_create1(0), one = 1;
  int *fd = calloc(conns, sizeof(int));
  long *pending = calloc(conns, sizeof(long)); // bytes of the echo still to come; 0: idle
  char *msg = malloc(len);
  memset(msg, 'x', len);
  for (int i = 0; i < conns; i++) {
    fd[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (fd[i] < 0 || connect(fd[i], (void *)&a, sizeof a)) {
      perror("connect");
      return 1;
    }
    setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (unsigned)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &ev);
  }
  int tick = -1;
  if (rate > 0) {
    tick = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct itimerspec its = {.it_interval = {0, 10000000}, .it_value = {0, 10000000}};
    timerfd_settime(tick, 0, &its, NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1ull << 40};
    epoll_ctl(ep, EPOLL_CTL_ADD, tick, &ev);
  } else {
    for (int i = 0; i < conns; i++) {
      if (write(fd[i], msg, len) == len) pending[i] = len;
    }
  }
  static char buf[1 << 16];
  struct epoll_event evs[512];
  long done = 0;
  int next = 0;
  double budget = 0, end = now() + secs;
  while (now() < end) {
    int n = epoll_wait(ep, evs, 512, 100);
    for (int e = 0; e < n; e++) {
      if (evs[e].data.u64 == 1ull << 40) {
        unsigned long long ticks;
        (void)!read(tick, &ticks, sizeof ticks);
        budget += rate / 100.0 * ticks;
        // Idle connections in turn, as many as the budget pays for; one pass at most.
        for (int tried = 0; budget >= 1 && tried < conns; tried++, next = (next + 1) % conns) {
          if (pending[next]) continue;
          if (write(fd[next], msg, len) == len) {
            pending[next] = len;
            budget -= 1;
          }
        }
        continue;
      }
      int i = (int)evs[e].data.u64;
      ssize_t r;
      while ((r = recv(fd[i], buf, sizeof buf, MSG_DONTWAIT)) > 0) pending[i] -= r;
      if (r == 0) {
        fprintf(stderr, "connection %d closed by the server\n", i);
        return 1;
      }
      if (pending[i] <= 0 && r < 0 && errno == EAGAIN) {
        pending[i] = 0;
        done++;
        if (rate <= 0 && write(fd[i], msg, len) == len) pending[i] = len;
      }
    }
  }
  printf("messages %ld\n", done);
  return 0;
}
