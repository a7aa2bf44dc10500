// A bulk UDP echo client for bench/udp_endpoint.py: keeps WINDOW datagrams of SEGMENT bytes in
// flight to an echo server on 127.0.0.1:PORT for SECONDS, sending them with GSO (one sendmsg of up
// to 64 equal datagrams, UDP_SEGMENT) or, with GSO 0, in sendmmsg batches of single datagrams, and
// receiving with GRO (UDP_GRO: the kernel may hand over several in one buffer) in recvmmsg batches.
// A window whose replies stop coming for 20 ms is taken as lost and refilled (counted).
// usage: udp_bulk PORT SECONDS SEGMENT GSO WINDOW
// prints: sent_datagrams N received_datagrams N received_bytes N lost_windows N seconds S
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define BATCH 32
#define SLOT 65536
#define MAX_SEGS 64

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 6) { fprintf(stderr, "usage: udp_bulk PORT SECONDS SEGMENT GSO WINDOW\n"); return 2; }
  int port = atoi(argv[1]), seg = atoi(argv[3]), gso = atoi(argv[4]);
  double seconds = atof(argv[2]);
  long window = atol(argv[5]);
  if (seg < 1 || seg > 65507 || window < 1) { fprintf(stderr, "bad SEGMENT or WINDOW\n"); return 2; }
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  int big = 4 << 20, on = 1;
  setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  if (setsockopt(s, SOL_UDP, UDP_GRO, &on, sizeof on)) perror("UDP_GRO");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
  if (connect(s, (void *)&a, sizeof a)) { perror("connect"); return 1; }
  int per_msg = 65507 / seg;
  if (per_msg > MAX_SEGS) per_msg = MAX_SEGS;
  if (per_msg < 1) per_msg = 1;
  static char out[65536], bufs[BATCH][SLOT];
  memset(out, 'b', sizeof out);
  static struct iovec iov[BATCH];
  static struct mmsghdr m[BATCH];
  static char ctl[BATCH][64];
  long sent = 0, received = 0, bytes = 0, lost_windows = 0, outstanding = 0;
  double start = now(), last_reply = start;
  while (now() - start < seconds) {
    // Fill the window.
    while (outstanding < window) {
      long room = window - outstanding;
      if (gso) {
        int k = room < per_msg ? (int)room : per_msg;
        char c[CMSG_SPACE(sizeof(uint16_t))] = {0};
        struct iovec v = {out, (size_t)k * seg};
        struct msghdr h = {.msg_iov = &v, .msg_iovlen = 1};
        if (k > 1) {
          h.msg_control = c;
          h.msg_controllen = sizeof c;
          struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
          cm->cmsg_level = SOL_UDP;
          cm->cmsg_type = UDP_SEGMENT;
          cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
          *(uint16_t *)CMSG_DATA(cm) = (uint16_t)seg;
        }
        if (sendmsg(s, &h, MSG_DONTWAIT) < 0) break;
        sent += k;
        outstanding += k;
      } else {
        int k = room < BATCH ? (int)room : BATCH;
        struct iovec v[BATCH];
        struct mmsghdr sm[BATCH];
        memset(sm, 0, sizeof sm);
        for (int i = 0; i < k; i++) {
          v[i] = (struct iovec){out, (size_t)seg};
          sm[i].msg_hdr.msg_iov = &v[i];
          sm[i].msg_hdr.msg_iovlen = 1;
        }
        int n = sendmmsg(s, sm, k, MSG_DONTWAIT);
        if (n <= 0) break;
        sent += n;
        outstanding += n;
      }
    }
    struct pollfd p = {s, POLLIN, 0};
    poll(&p, 1, 5);
    for (;;) {
      for (int i = 0; i < BATCH; i++) {
        iov[i] = (struct iovec){bufs[i], SLOT};
        memset(&m[i].msg_hdr, 0, sizeof m[i].msg_hdr);
        m[i].msg_hdr.msg_iov = &iov[i];
        m[i].msg_hdr.msg_iovlen = 1;
        m[i].msg_hdr.msg_control = ctl[i];
        m[i].msg_hdr.msg_controllen = sizeof ctl[i];
      }
      int n = recvmmsg(s, m, BATCH, MSG_DONTWAIT, 0);
      if (n <= 0) break;
      for (int i = 0; i < n; i++) {
        long len = m[i].msg_len, count = 1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m[i].msg_hdr); cm; cm = CMSG_NXTHDR(&m[i].msg_hdr, cm))
          if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
            int size = *(int *)CMSG_DATA(cm);
            if (size > 0) count = (len + size - 1) / size;
          }
        received += count;
        bytes += len;
        outstanding -= count;
      }
      last_reply = now();
      if (n < BATCH) break;
    }
    if (outstanding < 0) outstanding = 0;
    if (outstanding > 0 && now() - last_reply > 0.02) {
      outstanding = 0;
      lost_windows++;
      last_reply = now();
    }
  }
  printf("sent_datagrams %ld received_datagrams %ld received_bytes %ld lost_windows %ld seconds %.3f\n", sent,
         received, bytes, lost_windows, now() - start);
  return 0;
}
