/* The link shaper benchmark's UDP load generator and sink (built by bench_shaper.py).
 *
 *   udpload send DST_IP PORT RATE SECONDS PAYLOAD   paced sender (RATE 0: as fast as it can)
 *   udpload sink PORT SECONDS                        counts datagrams until SECONDS pass
 *
 * The sender paces with sendmmsg in small bursts (at most BURST datagrams a call, never
 * ahead of RATE * elapsed) and sleeps in between with 1 ns timer slack. A sender kept off
 * the CPU does not catch up in one long burst: frames more than 2 * BURST behind schedule
 * are skipped (counted as skipped=N, not as sent), so the offered load stays paced. Each
 * prints one line "frames=N seconds=S" (the sender also "skipped=N") on exit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BURST 32

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int sender(const char *ip, int port, double rate, double seconds, int payload) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (fd < 0 || inet_pton(AF_INET, ip, &to.sin_addr) != 1) return perror("socket"), 2;
    if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) return perror("connect"), 2;
    static char buf[9000];
    struct iovec iov[BURST];
    struct mmsghdr msgs[BURST];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BURST; i++) {
        iov[i].iov_base = buf;
        iov[i].iov_len = payload;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    long long sent = 0, skipped = 0;
    double start = now_s(), t = start;
    while ((t = now_s()) - start < seconds) {
        long long due = rate > 0 ? (long long)(rate * (t - start)) + 1 : sent + BURST;
        long long want = due - sent - skipped;
        if (want > 2 * BURST) {
            skipped += want - BURST;
            want = BURST;
        }
        if (want <= 0) {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
            continue;
        }
        if (want > BURST) want = BURST;
        int n = sendmmsg(fd, msgs, (unsigned)want, 0);
        if (n > 0) sent += n;
    }
    printf("frames=%lld seconds=%.6f skipped=%lld\n", sent, now_s() - start, skipped);
    return 0;
}

static int sink(int port, double seconds) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (fd < 0) return perror("socket"), 2;
    int size = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size);
    if (bind(fd, (struct sockaddr *)&at, sizeof at) < 0) return perror("bind"), 2;
    struct timeval tv = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static char bufs[BURST][2048];
    struct iovec iov[BURST];
    struct mmsghdr msgs[BURST];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BURST; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = sizeof bufs[i];
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    printf("ready\n");
    fflush(stdout);
    long long got = 0;
    double start = now_s();
    while (now_s() - start < seconds) {
        int n = recvmmsg(fd, msgs, BURST, 0, NULL);
        if (n > 0) got += n;
    }
    printf("frames=%lld seconds=%.6f\n", got, now_s() - start);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "send"))
        return sender(argv[2], atoi(argv[3]), atof(argv[4]), atof(argv[5]), atoi(argv[6]));
    if (argc == 4 && !strcmp(argv[1], "sink")) return sink(atoi(argv[2]), atof(argv[3]));
    fprintf(stderr, "usage: udpload send IP PORT RATE SECONDS PAYLOAD | sink PORT SECONDS\n");
    return 2;
}
