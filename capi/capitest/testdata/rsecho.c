/*
 * rsecho: a plain TCP echo pair, for running under librspreload.so (which turns these
 * socket calls into rsocket calls). No rsocket API here: only socket(2) and friends.
 *
 *   rsecho server ADDR PORT   accept one connection, echo it until EOF, close
 *   rsecho client ADDR PORT   send 200000 patterned bytes (write and writev), shut down
 *                             the writing side, read the echo to EOF, check it; prints
 *                             "echo ok 200000" and the peer's address
 *   rsecho sink ADDR PORT     select, accept one connection, wait 2.5 s, then read to EOF;
 *                             prints "sink got N"
 *   rsecho flood ADDR PORT    write 4 MiB (blocking: the sink's ring fills while it
 *                             waits), close; prints "flood done"
 */
#include <time.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define TOTAL 200000

static void die(const char *what)
{
	fprintf(stderr, "rsecho: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* wait_for polls fd for ev: readiness must come through poll(2) too */
static void wait_for(int fd, short ev)
{
	struct pollfd p = {.fd = fd, .events = ev};
	int n = poll(&p, 1, 10000);

	if (n < 0)
		die("poll");
	if (n == 0) {
		fprintf(stderr, "rsecho: poll timed out\n");
		exit(1);
	}
}

static void write_all(int fd, const char *b, size_t n)
{
	while (n) {
		ssize_t w;

		wait_for(fd, POLLOUT);
		w = write(fd, b, n);
		if (w < 0)
			die("write");
		b += w;
		n -= w;
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	static char buf[TOTAL], got[TOTAL];
	int fd, one = 1;

	if (argc != 4)
		return 2;
	a.sin_port = htons(atoi(argv[3]));
	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
		return 2;
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		die("socket");
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		die("setsockopt TCP_NODELAY");
	if (!strcmp(argv[1], "sink")) {
		int c;
		ssize_t n;
		long long got = 0;
		struct timespec nap = {2, 500000000};

		fd_set rd;
		struct timeval tv = {10, 0};

		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4))
			die("bind/listen");
		/* select(2) here, poll(2) elsewhere: both go through librspreload */
		FD_ZERO(&rd);
		FD_SET(fd, &rd);
		if (select(fd + 1, &rd, NULL, NULL, &tv) != 1 || !FD_ISSET(fd, &rd)) {
			fprintf(stderr, "rsecho: select: no connection\n");
			return 1;
		}
		if ((c = accept(fd, NULL, NULL)) < 0)
			die("accept");
		nanosleep(&nap, NULL);
		while ((n = read(c, buf, sizeof(buf))) > 0)
			got += n;
		if (n < 0)
			die("read");
		close(c);
		close(fd);
		printf("sink got %lld\n", got);
		return 0;
	}
	if (!strcmp(argv[1], "flood")) {
		int i;

		if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
			die("connect");
		for (i = 0; i < (4 << 20) / 65536; i++) {
			size_t left = 65536;

			while (left) {
				ssize_t w = write(fd, buf, left);

				if (w < 0)
					die("write");
				left -= w;
			}
		}
		close(fd);
		printf("flood done\n");
		return 0;
	}
	if (!strcmp(argv[1], "server")) {
		int c;
		ssize_t n;

		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
			die("setsockopt SO_REUSEADDR");
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4))
			die("bind/listen");
		wait_for(fd, POLLIN);
		if ((c = accept(fd, NULL, NULL)) < 0)
			die("accept");
		for (;;) {
			wait_for(c, POLLIN);
			n = read(c, buf, sizeof(buf));
			if (n < 0)
				die("read");
			if (n == 0)
				break;
			write_all(c, buf, n);
		}
		close(c);
		close(fd);
		printf("server done\n");
		return 0;
	}
	size_t i, have = 0;
	struct sockaddr_in peer;
	socklen_t len = sizeof(peer);
	char ip[64];

	for (i = 0; i < TOTAL; i++)
		buf[i] = (char)(i * 7 + i / 251);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	if (getpeername(fd, (struct sockaddr *)&peer, &len))
		die("getpeername");
	/* the path MTU's payload, as rsockets answers it: iperf3 asks on every connection */
	int mss = 0;
	socklen_t mlen = sizeof(mss);
	if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &mlen))
		die("getsockopt TCP_MAXSEG");
	if (mss < 256 || mss > 4096 || (mss & (mss - 1))) {
		fprintf(stderr, "rsecho: TCP_MAXSEG %d is not an IB MTU\n", mss);
		return 1;
	}
	/* TCP_INFO: established, the same segment size, no retransmission (iperf3 reads it) */
	struct tcp_info ti;
	socklen_t tlen = sizeof(ti);
	memset(&ti, 0xa5, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tlen))
		die("getsockopt TCP_INFO");
	if (tlen != sizeof(ti) || ti.tcpi_state != TCP_ESTABLISHED || ti.tcpi_total_retrans != 0 ||
	    ti.tcpi_retransmits != 0 || ti.tcpi_snd_mss != (unsigned)mss || ti.tcpi_rtt != 0) {
		fprintf(stderr, "rsecho: TCP_INFO len %u state %u retrans %u/%u mss %u rtt %u\n", tlen,
			ti.tcpi_state, ti.tcpi_total_retrans, ti.tcpi_retransmits, ti.tcpi_snd_mss, ti.tcpi_rtt);
		return 1;
	}
	write_all(fd, buf, TOTAL / 2);
	struct iovec v[2] = {{buf + TOTAL / 2, 1000}, {buf + TOTAL / 2 + 1000, TOTAL / 2 - 1000}};
	ssize_t w = writev(fd, v, 2);
	if (w < 0)
		die("writev");
	write_all(fd, buf + TOTAL / 2 + w, TOTAL / 2 - w);
	if (shutdown(fd, SHUT_WR))
		die("shutdown");
	for (;;) {
		ssize_t n;

		wait_for(fd, POLLIN);
		n = read(fd, got + have, sizeof(got) - have);
		if (n < 0)
			die("read");
		if (n == 0)
			break;
		have += n;
		if (have == sizeof(got)) {
			char extra;

			if (read(fd, &extra, 1) != 0) {
				fprintf(stderr, "rsecho: more than was sent\n");
				return 1;
			}
			break;
		}
	}
	if (have != TOTAL || memcmp(buf, got, TOTAL)) {
		fprintf(stderr, "rsecho: echo differs (%zu bytes back)\n", have);
		return 1;
	}
	close(fd);
	printf("echo ok %d from %s:%d\n", TOTAL, inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip)), ntohs(peer.sin_port));
	return 0;
}
