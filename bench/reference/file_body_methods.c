// Micro-benchmark: cost per byte of serving a file body over HTTP/1.1 keep-alive, by method,
// in a minimal C server (a thread per connection, blocking sockets), to choose sockscale's file
// path before building it (issue 14). Answers every request head with the whole file:
//   mem       head and body from memory, one send
//   sendfile  head with MSG_MORE, then sendfile(2) in CHUNK-byte calls
//   pread     head with MSG_MORE, then pread into a CHUNK-byte buffer and send, in turn
//   mmap      head and the file's mapping in one sendmsg
//   splice    head with MSG_MORE, then file -> pipe (F_SETPIPE_SZ CHUNK) -> socket
//   zerocopy  head with MSG_MORE, then the file's mapping in CHUNK-byte sends with MSG_ZEROCOPY
//             (SO_ZEROCOPY); completions are read from the error queue after every send, and
//             at exit the server prints how many the kernel reports it copied anyway
//             (SO_EE_CODE_ZEROCOPY_COPIED: what loopback does)
// SNDBUF=N in the environment sets SO_SNDBUF on every connection.
//
// gcc -O2 -pthread -o file_body_methods bench/reference/file_body_methods.c
// taskset -c 0 ./file_body_methods 9500 FILE MODE [CHUNK] &
// taskset -c 1 wrk -t1 -c10 -d4s http://127.0.0.1:9500/     # server CPU from /proc/PID/stat
//
// usage: file_body_methods PORT FILE MODE [CHUNK]
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/sendfile.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <signal.h>
#include <linux/errqueue.h>
#include <stdatomic.h>
static atomic_long zc_done, zc_copied;
// Read every zerocopy completion waiting on c's error queue (without blocking).
static void zc_reap(int c) {
  for (;;) {
    char control[128]; struct msghdr m = {0}; m.msg_control = control; m.msg_controllen = sizeof control;
    if (recvmsg(c, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
      struct sock_extended_err *e = (void *)CMSG_DATA(cm);
      if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      long n = (long)e->ee_data - (long)e->ee_info + 1;
      atomic_fetch_add(&zc_done, n);
      if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) atomic_fetch_add(&zc_copied, n);
    }
  }
}
static void report(int sig) { (void)sig; fprintf(stderr, "zerocopy sends completed %ld, copied by the kernel %ld\n", (long)zc_done, (long)zc_copied); _exit(0); }
static int fd_file; static off_t flen; static char *mem; static char *map; static const char *mode; static size_t chunk;
static char head[256]; static int headlen;
static int readreq(int c, char *buf, int *have) {
  for (;;) { char *e = memmem(buf, *have, "\r\n\r\n", 4); if (e) { int used = e + 4 - buf; memmove(buf, buf + used, *have - used); *have -= used; return 1; }
    int n = read(c, buf + *have, 4096 - *have); if (n <= 0) return 0; *have += n; }
}
static int sendall(int c, const char *p, size_t n, int flags) { while (n) { ssize_t w = send(c, p, n, flags | MSG_NOSIGNAL); if (w <= 0) return -1; p += w; n -= w; } return 0; }
static void *conn(void *arg) {
  int c = (int)(long)arg; char buf[4096]; int have = 0; char *pb = NULL; int pfd[2] = {-1, -1};
  if (!strcmp(mode, "pread")) pb = malloc(chunk);
  if (!strcmp(mode, "splice")) { pipe2(pfd, 0); fcntl(pfd[1], F_SETPIPE_SZ, (int)chunk); }
  while (readreq(c, buf, &have)) {
    if (!strcmp(mode, "mem")) { if (sendall(c, mem, headlen + flen, 0)) break; continue; }
    if (!strcmp(mode, "mmap")) { struct iovec iov[2] = {{head, headlen}, {map, flen}}; struct msghdr m = {0}; size_t left = headlen + flen; m.msg_iov = iov; m.msg_iovlen = 2;
      while (left) { ssize_t w = sendmsg(c, &m, MSG_NOSIGNAL); if (w <= 0) goto out; left -= w; while (w && m.msg_iovlen) { if ((size_t)w >= m.msg_iov[0].iov_len) { w -= m.msg_iov[0].iov_len; m.msg_iov++; m.msg_iovlen--; } else { m.msg_iov[0].iov_base = (char*)m.msg_iov[0].iov_base + w; m.msg_iov[0].iov_len -= w; w = 0; } } } continue; }
    if (sendall(c, head, headlen, MSG_MORE)) break;
    off_t off = 0;
    while (off < flen) {
      size_t want = flen - off < (off_t)chunk ? flen - off : chunk;
      if (!strcmp(mode, "sendfile")) { ssize_t w = sendfile(c, fd_file, &off, want); if (w <= 0) goto out; }
      else if (!strcmp(mode, "pread")) { ssize_t r = pread(fd_file, pb, want, off); if (r <= 0) goto out; if (sendall(c, pb, r, 0)) goto out; off += r; }
      else if (!strcmp(mode, "zerocopy")) { const char *p = map + off; size_t n = want; while (n) { ssize_t w = send(c, p, n, MSG_ZEROCOPY | MSG_NOSIGNAL); if (w <= 0) goto out; p += w; n -= w; zc_reap(c); } off += want; }
      else if (!strcmp(mode, "splice")) { loff_t o = off; ssize_t r = splice(fd_file, &o, pfd[1], NULL, want, SPLICE_F_MOVE); if (r <= 0) goto out; ssize_t left = r; while (left) { ssize_t w = splice(pfd[0], NULL, c, NULL, left, SPLICE_F_MOVE | (off + r < flen ? SPLICE_F_MORE : 0)); if (w <= 0) goto out; left -= w; } off += r; }
    }
  }
out: close(c); free(pb); return NULL;
}
int main(int argc, char **argv) {
  int port = atoi(argv[1]); fd_file = open(argv[2], O_RDONLY); mode = argv[3]; chunk = argc > 4 ? strtoul(argv[4], 0, 0) : (1 << 20);
  struct stat st; fstat(fd_file, &st); flen = st.st_size;
  headlen = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nServer: fb\r\nContent-Type: application/octet-stream\r\nContent-Length: %lld\r\n\r\n", (long long)flen);
  mem = malloc(headlen + flen); memcpy(mem, head, headlen); pread(fd_file, mem + headlen, flen, 0);
  map = mmap(NULL, flen, PROT_READ, MAP_SHARED, fd_file, 0);
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1; setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
  if (bind(l, (void*)&a, sizeof a) || listen(l, 128)) { perror("listen"); return 1; }
  signal(SIGTERM, report); signal(SIGINT, report);
  signal(SIGPIPE, SIG_IGN);  // sendfile and splice have no MSG_NOSIGNAL; wrk closes mid-body at its end
  int sndbuf = getenv("SNDBUF") ? atoi(getenv("SNDBUF")) : 0;
  for (;;) { int c = accept(l, NULL, NULL); if (c < 0) continue; setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sndbuf > 0) setsockopt(c, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (!strcmp(mode, "zerocopy") && setsockopt(c, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one)) perror("SO_ZEROCOPY");
    pthread_t t; pthread_create(&t, NULL, conn, (void*)(long)c); pthread_detach(t); }
}
