/*
 * Protection domains, memory regions, address handles and memory windows.
 *
 * Registered memory is shared with the daemon by moving the buffer's pages onto a
 * memfd in place (docs/attach-protocol.md, "Memory regions: no copy"): the pages are
 * copied into a sealed memfd, which is mapped over the same addresses (MAP_FIXED), so
 * the program's pointers and bytes stay as they were and the daemon maps the same pages.
 * A write by another thread to a page the buffer shares with other data, between the
 * copy and the mapping, would be lost. So in a program of several threads a buffer that
 * does not start on a page and fill whole pages is refused with EINVAL and a message,
 * unless it lies inside pages a live registration already moved (it shares them); a
 * program of one thread cannot write during the call, and has the pages around any
 * buffer moved (its other data on them stays where it is, shared with the daemon, which
 * can reach only the registered range).
 * The calling thread writes its own stack throughout the call, and a buffer on that
 * stack (or near it) shares pages with the frames of the call itself: the copy and the
 * mapping run on a stack of their own (gva_off_stack), so that nothing the thread writes
 * between them is lost ("stack smashing detected" when it was).
 * Moved pages are MADV_DONTFORK, as ibv_fork_init makes registered memory, so a child
 * after fork() does not share them with the daemon. When the last registration of the
 * pages closes they move back onto private anonymous memory: glibc's allocator, like
 * Go's, expects memory it gave back with MADV_DONTNEED to read as zeros, which a shared
 * file mapping does not.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>
#include "gva.h"

int gv_alloc_pd(uintptr_t ch, uintptr_t *out)
{
	struct gva_dev *d = (struct gva_dev *)ch;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_pd *p;
	int rc;

	if (!d)
		return EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return ENOMEM;
	gva_msg_init(&m);
	if ((rc = gva_call(d, GVA_ALLOC_PD, &m, NULL, 0, buf, &r, NULL, 0))) {
		free(p);
		return rc;
	}
	p->d = d;
	p->h = gva_get32(&r);
	*out = (uintptr_t)p;
	return 0;
}

int gv_dealloc_pd(uintptr_t h)
{
	struct gva_pd *p = (struct gva_pd *)h;
	int rc;

	if (!p)
		return EINVAL;
	rc = gva_simple(p->d, GVA_DEALLOC_PD, p->h);
	if (rc && !gva_usable(p->d))
		return rc; /* EBUSY while objects use it */
	free(p);
	return 0;
}

struct gva_span {
	uintptr_t start, end;
	int fd;
	ino_t ino;
	int live; /* registrations using it */
	struct gva_span *next;
};

static pthread_mutex_t gva_spans_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gva_span *gva_spans;

static long gva_page(void) { return sysconf(_SC_PAGESIZE); }

/*
 * fork(): moved pages are MADV_DONTFORK, so a child has none of them. It forgets the
 * spans (not their descriptors: its copies of the parent's regions still name them and
 * close them at deregistration), so that memory it maps at those addresses is moved
 * anew rather than taken for a span the parent shares.
 */
static void gva_spans_prepare(void) { pthread_mutex_lock(&gva_spans_mu); }
static void gva_spans_parent(void) { pthread_mutex_unlock(&gva_spans_mu); }
static void gva_spans_child(void)
{
	gva_spans = NULL;
	pthread_mutex_unlock(&gva_spans_mu);
}

__attribute__((constructor)) static void gva_mem_init(void)
{
	pthread_atfork(gva_spans_prepare, gva_spans_parent, gva_spans_child);
}

/*
 * gva_movable says whether [start, end) is private memory: anonymous (the heap, the
 * stack, anonymous mmap) or a private file mapping (a program's .data and .bss, where
 * rdma-core's rdma_client keeps its buffers: the program has its own copy of those
 * pages, never written back). Only those can be moved without changing what the program
 * sees: moving a shared mapping would cut it from its file or from the processes it is
 * shared with, and the kernel's special mappings are not memory to register. 0, or
 * EINVAL after saying why.
 */
static int gva_movable(uintptr_t start, uintptr_t end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	int rc = 0;

	if (!f)
		return 0; /* no /proc: nothing to check against */
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b, ino;
		char perms[8], dev[16], name[256] = "";
		unsigned long long off;

		if (sscanf(line, "%lx-%lx %7s %llx %15s %lu %255s", &a, &b, perms, &off, dev, &ino, name) < 6)
			continue;
		if (b <= start || a >= end)
			continue;
		(void)ino;
		if (perms[3] != 'p' || (name[0] == '[' && strncmp(name, "[heap]", 6) != 0 &&
					strncmp(name, "[stack", 6) != 0)) {
			fprintf(stderr, "goverbs: memory region in [%#" PRIxPTR ", %#" PRIxPTR ") lies in %s mapping "
					"%s: an attached device registers private memory (malloc, posix_memalign, "
					"anonymous mmap, a program's data): refused\n", start, end,
				perms[3] != 'p' ? "a shared" : "a special", name[0] ? name : "(unnamed)");
			rc = EINVAL;
			break;
		}
	}
	fclose(f);
	return rc;
}

/*
 * gva_off_stack runs fn(arg) on a stack of its own and returns when it has. The pages
 * moved between a copy and a mapping must not be written in between, and the calling
 * thread's stack may be among them: on its own stack the work writes none of the
 * caller's frames (the switch saves the caller's registers in heap memory; the return
 * address it pushes is written before the copy). A signal delivered meanwhile runs on
 * the private stack too. Returns ENOMEM, or 0 when fn ran.
 */
#define GVA_WORK_STACK (64 * 1024)

struct gva_off_stack_call {
	void (*fn)(void *);
	void *arg;
};

/* makecontext passes ints: the call's address comes in two halves. */
static void gva_off_stack_entry(unsigned int hi, unsigned int lo)
{
	struct gva_off_stack_call *c = (struct gva_off_stack_call *)(((uintptr_t)hi << 32) | lo);

	c->fn(c->arg);
}

static int gva_off_stack(void (*fn)(void *), void *arg)
{
	struct gva_off_stack_call call = {fn, arg};
	uint64_t p = (uintptr_t)&call;
	ucontext_t *uc = calloc(2, sizeof(*uc));
	void *stack = malloc(GVA_WORK_STACK);
	int rc = 0;

	if (!uc || !stack || getcontext(&uc[1]) < 0) {
		rc = ENOMEM;
		goto out;
	}
	uc[1].uc_stack.ss_sp = stack;
	uc[1].uc_stack.ss_size = GVA_WORK_STACK;
	uc[1].uc_link = &uc[0];
	makecontext(&uc[1], (void (*)(void))gva_off_stack_entry, 2, (unsigned int)(p >> 32), (unsigned int)p);
	if (swapcontext(&uc[0], &uc[1]) < 0)
		rc = ENOMEM;
out:
	free(stack);
	free(uc);
	return rc;
}

/* gva_move_pages is gva_move's copy and mapping, run off the caller's stack. */
struct gva_move_pages {
	uintptr_t start;
	size_t size;
	int fd;
	int err;
};

static void gva_move_pages(void *arg)
{
	struct gva_move_pages *m = arg;

	for (size_t off = 0; off < m->size;) {
		ssize_t n = pwrite(m->fd, (void *)(m->start + off), m->size - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) { /* EFAULT: a page of the range is not mapped (readable) */
			m->err = n < 0 ? errno : EFAULT;
			return;
		}
		off += (size_t)n;
	}
	if (mmap((void *)m->start, m->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m->fd, 0) !=
	    (void *)m->start) {
		m->err = errno;
		return;
	}
	madvise((void *)m->start, m->size, MADV_DONTFORK);
}

/* gva_move puts [start, start+size) onto a new sealed memfd, in place. */
static int gva_move(uintptr_t start, size_t size, struct gva_span **out)
{
	struct gva_move_pages m = {start, size, -1, 0};
	struct gva_span *s;
	struct stat st;
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return ENOMEM;
	m.fd = memfd_create("goverbs-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (m.fd < 0) {
		rc = errno;
		free(s);
		return rc;
	}
	if (ftruncate(m.fd, (off_t)size) < 0 ||
	    fcntl(m.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 || fstat(m.fd, &st) < 0)
		m.err = errno;
	else if ((rc = gva_off_stack(gva_move_pages, &m)))
		m.err = rc;
	if (m.err) {
		close(m.fd);
		free(s);
		return m.err;
	}
	s->start = start;
	s->end = start + size;
	s->fd = m.fd;
	s->ino = st.st_ino;
	s->live = 1;
	*out = s;
	return 0;
}

/* gva_share finds or makes the span holding [addr, addr+len) and addr's offset in it. */
static int gva_share(uintptr_t addr, size_t len, struct gva_span **out, uint64_t *off)
{
	uintptr_t page = (uintptr_t)gva_page();
	uintptr_t start = addr & ~(page - 1), end = (addr + len + page - 1) & ~(page - 1);
	int rc = 0;

	if (addr + len < addr)
		return EINVAL;
	pthread_mutex_lock(&gva_spans_mu);
	for (struct gva_span *s = gva_spans; s; s = s->next) {
		if (start >= s->start && end <= s->end) {
			s->live++;
			*out = s;
			*off = addr - s->start;
			goto out;
		}
		if (start < s->end && end > s->start) {
			fprintf(stderr, "goverbs: memory region [%#" PRIxPTR ", %#" PRIxPTR ") straddles the pages of "
					"a registered region: refused\n", addr, addr + len);
			rc = EINVAL;
			goto out;
		}
	}
	/*
	 * Pages the buffer shares with other data can be moved only while no other thread
	 * of the program can write them: in a program of one thread (besides ours, which
	 * never touch its memory), during this call. Threads parked in librdmacm
	 * (gva_private.c) do not count, and stay parked while the pages move; in a program
	 * that uses librdmacm, a thread between two rdma_get_cm_event calls gets up to
	 * 200 ms to park again.
	 */
	int moving = 0;
	if (addr != start || len % page) {
		for (int tries = 0; tries < 200; tries++) {
			gva_move_begin();
			if (gva_program_threads() == 1) {
				moving = 1;
				break;
			}
			gva_move_end();
			if (!gva_parking_used())
				break; /* no rdma_cm thread to wait for */
			usleep(1000);
		}
	}
	if ((addr != start || len % page) && !moving) {
		fprintf(stderr, "goverbs: an attached device registers whole pages in a program of several threads: "
				"memory region [%#" PRIxPTR ", %#" PRIxPTR ") must start on a page and be a whole number "
				"of pages (posix_memalign/mmap it, length a multiple of %lu): refused\n",
			addr, addr + len, (unsigned long)page);
		rc = EINVAL;
		goto out;
	}
	if (!(rc = gva_movable(start, end)))
		rc = gva_move(start, end - start, out);
	if (moving)
		gva_move_end();
	if (rc) {
		if (rc == EFAULT)
			gva_debug("memory region [%#" PRIxPTR ", %#" PRIxPTR ") is not mapped", addr, addr + len);
		goto out;
	}
	(*out)->next = gva_spans;
	gva_spans = *out;
	*off = addr - start;
out:
	pthread_mutex_unlock(&gva_spans_mu);
	return rc;
}

/*
 * gva_still_ours checks in /proc/self/maps that the span's addresses still map its
 * memfd: a program that unmapped (freed) the buffer before deregistering it may have
 * something else there now, which moving the pages back would destroy.
 */
static int gva_still_ours(const struct gva_span *s)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	uintptr_t covered = s->start;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b, ino;
		char perms[8], dev[16];
		unsigned long long off;

		if (sscanf(line, "%lx-%lx %7s %llx %15s %lu", &a, &b, perms, &off, dev, &ino) != 6)
			continue;
		if (b <= s->start || a >= s->end)
			continue;
		if (ino != (unsigned long)s->ino || a > covered) {
			fclose(f);
			return 0;
		}
		covered = b;
	}
	fclose(f);
	return covered >= s->end;
}

/* gva_move_back is gva_unshare's copy and mapping, run off the caller's stack. */
struct gva_move_back {
	struct gva_span *s;
	int err;
};

static void gva_move_back(void *arg)
{
	struct gva_move_back *b = arg;
	struct gva_span *s = b->s;
	size_t size = s->end - s->start;
	void *tmp = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (tmp == MAP_FAILED) {
		b->err = errno;
		return;
	}
	for (size_t off = 0; off < size;) {
		ssize_t n = pread(s->fd, (uint8_t *)tmp + off, size - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			b->err = n < 0 ? errno : EIO;
			munmap(tmp, size);
			return;
		}
		off += (size_t)n;
	}
	/* one step: no instant where the program's pages are unmapped */
	if (mremap(tmp, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)s->start) != (void *)s->start) {
		b->err = errno;
		munmap(tmp, size);
	}
}

/* gva_unshare drops a hold on a span; the last one moves its pages back to private memory. */
static void gva_unshare(struct gva_span *s)
{
	struct gva_move_back back = {0};

	pthread_mutex_lock(&gva_spans_mu);
	if (--s->live > 0) {
		pthread_mutex_unlock(&gva_spans_mu);
		return;
	}
	for (struct gva_span **p = &gva_spans; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	pthread_mutex_unlock(&gva_spans_mu);
	if (!gva_still_ours(s)) {
		gva_debug("the pages of a deregistered region were unmapped by the program: left as they are");
		goto out;
	}
	back.s = s;
	if (gva_off_stack(gva_move_back, &back) || back.err) {
		errno = back.err ? back.err : ENOMEM;
		gva_debug("move a region's pages back: %m");
	}
out:
	close(s->fd);
	free(s);
}

/* The access flags the device implements, and the optional ones it may ignore. */
#define GVA_ACCESS_KNOWN (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
			  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

int gva_reg_internal(struct gva_pd *p, void *addr, size_t length, unsigned int access, struct gva_mr **out,
		     uint32_t *lkey, uint32_t *rkey)
{
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_mr *mr;
	uint64_t off;
	int rc;

	access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
	if (access & ~(unsigned int)GVA_ACCESS_KNOWN)
		return EOPNOTSUPP; /* on-demand paging, zero-based, huge-page hints */
	if ((rc = gva_usable(p->d)))
		return rc;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return ENOMEM;
	if ((rc = gva_share((uintptr_t)addr, length, &mr->span, &off))) {
		free(mr);
		return rc;
	}
	gva_msg_init(&m);
	gva_put32(&m, p->h);
	gva_put32(&m, access);
	gva_put64(&m, (uintptr_t)addr);
	gva_put64(&m, length);
	gva_put64(&m, off);
	rc = gva_call(p->d, GVA_REG_MR, &m, &mr->span->fd, 1, buf, &r, NULL, 0);
	if (rc) {
		gva_unshare(mr->span);
		free(mr);
		return rc;
	}
	mr->d = p->d;
	mr->h = gva_get32(&r);
	*lkey = gva_get32(&r);
	*rkey = gva_get32(&r);
	pthread_mutex_lock(&p->d->objmu);
	mr->next = p->d->mrs;
	if (mr->next)
		mr->next->prev = mr;
	p->d->mrs = mr;
	pthread_mutex_unlock(&p->d->objmu);
	*out = mr;
	return 0;
}

static void gva_mr_unlink(struct gva_dev *d, struct gva_mr *mr)
{
	if (mr->prev)
		mr->prev->next = mr->next;
	else
		d->mrs = mr->next;
	if (mr->next)
		mr->next->prev = mr->prev;
	mr->prev = mr->next = NULL;
}

/*
 * A context closed with regions still registered: the daemon drops them with the
 * connection, and their pages must not stay on the memfd, where the program's allocator
 * would find old bytes in memory it gives back with MADV_DONTNEED and takes for zeros.
 * The regions' structs stay for a later ibv_dereg_mr, which then only frees them.
 */
void gva_close_mrs(struct gva_dev *d)
{
	pthread_mutex_lock(&d->objmu);
	while (d->mrs) {
		struct gva_mr *mr = d->mrs;

		gva_mr_unlink(d, mr);
		gva_unshare(mr->span);
		mr->span = NULL;
		mr->d = NULL;
	}
	pthread_mutex_unlock(&d->objmu);
}

int gv_reg_mr(uintptr_t ph, void *addr, size_t length, unsigned int access, uintptr_t *out,
	      uint32_t *lkey, uint32_t *rkey)
{
	struct gva_pd *p = (struct gva_pd *)ph;
	struct gva_mr *mr;
	int rc;

	if (!p || !addr || !length)
		return EINVAL;
	rc = gva_reg_internal(p, addr, length, access, &mr, lkey, rkey);
	if (rc)
		return rc;
	*out = (uintptr_t)mr;
	return 0;
}

/*
 * A region whose daemon is gone, or that a child inherited, has nothing to deregister;
 * its pages go back to private memory all the same.
 */
int gv_dereg_mr(uintptr_t h)
{
	struct gva_mr *mr = (struct gva_mr *)h;
	int rc;

	if (!mr)
		return EINVAL;
	if (!mr->d) { /* its context closed: nothing left to do */
		free(mr);
		return 0;
	}
	rc = gva_simple(mr->d, GVA_DEREG_MR, mr->h);
	if (rc && !gva_usable(mr->d))
		return rc; /* EBUSY while windows are bound */
	pthread_mutex_lock(&mr->d->objmu);
	gva_mr_unlink(mr->d, mr);
	pthread_mutex_unlock(&mr->d->objmu);
	gva_unshare(mr->span);
	free(mr);
	return 0;
}

/* The address vector on the wire (docs/attach-protocol.md, "Attributes"). */
int gva_put_av(struct gva_msg *m, const struct ibv_ah_attr *a);
int gva_put_av(struct gva_msg *m, const struct ibv_ah_attr *a)
{
	if (!a->is_global)
		return EINVAL; /* RoCE addresses by GID: no GRH, no destination */
	gva_putn(m, a->grh.dgid.raw, 16);
	gva_put8(m, a->grh.sgid_index);
	gva_put8(m, a->grh.hop_limit);
	gva_put8(m, a->grh.traffic_class);
	gva_put8(m, a->sl);
	gva_put8(m, a->port_num);
	gva_put8(m, 0);
	gva_put8(m, 0);
	gva_put8(m, 0);
	gva_put32(m, a->grh.flow_label);
	return 0;
}

void gva_get_av(struct gva_rd *r, struct ibv_ah_attr *a);
void gva_get_av(struct gva_rd *r, struct ibv_ah_attr *a)
{
	uint8_t pad[3];
	static const uint8_t zero[16];

	memset(a, 0, sizeof(*a));
	gva_getn(r, a->grh.dgid.raw, 16);
	a->grh.sgid_index = gva_get8(r);
	a->grh.hop_limit = gva_get8(r);
	a->grh.traffic_class = gva_get8(r);
	a->sl = gva_get8(r);
	a->port_num = gva_get8(r);
	gva_getn(r, pad, 3);
	a->grh.flow_label = gva_get32(r);
	a->is_global = memcmp(a->grh.dgid.raw, zero, 16) != 0;
}

int gv_create_ah(uintptr_t ph, struct ibv_ah_attr *a, uintptr_t *out)
{
	struct gva_pd *p = (struct gva_pd *)ph;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_ah *ah;
	int rc;

	if (!p)
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, p->h);
	if (gva_put_av(&m, a)) {
		gva_debug("create AH: RoCE address vector without a GRH (is_global 0)");
		return EINVAL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return ENOMEM;
	if ((rc = gva_call(p->d, GVA_CREATE_AH, &m, NULL, 0, buf, &r, NULL, 0))) {
		free(ah);
		return rc;
	}
	ah->d = p->d;
	ah->h = gva_get32(&r);
	*out = (uintptr_t)ah;
	return 0;
}

int gv_destroy_ah(uintptr_t h)
{
	struct gva_ah *ah = (struct gva_ah *)h;
	int rc;

	if (!ah)
		return EINVAL;
	rc = gva_simple(ah->d, GVA_DESTROY_AH, ah->h);
	if (rc && !gva_usable(ah->d))
		return rc;
	free(ah);
	return 0;
}

/* An IPv4 header in the GRH area's last 20 bytes (RoCEv2 over IPv4), as verbs.AHAttrFromWC tells it. */
static int gva_grh_is_ipv4(const uint8_t *grh)
{
	const uint8_t *ip = grh + 20;
	uint32_t sum = 0;

	if (ip[0] >> 4 != 4)
		return 0;
	if (grh[0] >> 4 != 6)
		return 1;
	if ((ip[0] & 15) != 5)
		return 0;
	for (int i = 0; i < 20; i += 2)
		sum += (uint32_t)ip[i] << 8 | ip[i + 1];
	while (sum > 0xffff)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

int gv_init_ah_from_wc(uint8_t port, struct ibv_wc *wc, void *grhp, struct ibv_ah_attr *out)
{
	const uint8_t *grh = grhp;

	if (!(wc->wc_flags & IBV_WC_GRH))
		return EINVAL;
	memset(out, 0, sizeof(*out));
	out->port_num = port;
	out->is_global = 1;
	out->grh.hop_limit = 64;
	if (gva_grh_is_ipv4(grh)) {
		/* the IPv4-mapped GID of the source address */
		out->grh.dgid.raw[10] = 0xff;
		out->grh.dgid.raw[11] = 0xff;
		memcpy(&out->grh.dgid.raw[12], grh + 20 + 12, 4);
		out->grh.traffic_class = grh[21];
		return 0;
	}
	if (grh[0] >> 4 == 6) {
		memcpy(out->grh.dgid.raw, grh + 8, 16);
		out->grh.traffic_class = (uint8_t)(grh[0] << 4 | grh[1] >> 4);
		out->grh.flow_label = (uint32_t)(grh[1] & 15) << 16 | (uint32_t)grh[2] << 8 | grh[3];
		return 0;
	}
	return EINVAL;
}

int gv_alloc_mw(uintptr_t ph, int typ, uintptr_t *out, uint32_t *rkey)
{
	struct gva_pd *p = (struct gva_pd *)ph;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_mw *mw;
	int rc;

	if (!p || (typ != IBV_MW_TYPE_1 && typ != IBV_MW_TYPE_2))
		return EINVAL;
	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return ENOMEM;
	gva_msg_init(&m);
	gva_put32(&m, p->h);
	gva_put8(&m, (uint8_t)typ);
	if ((rc = gva_call(p->d, GVA_ALLOC_MW, &m, NULL, 0, buf, &r, NULL, 0))) {
		free(mw);
		return rc;
	}
	mw->d = p->d;
	mw->h = gva_get32(&r);
	*rkey = gva_get32(&r);
	*out = (uintptr_t)mw;
	return 0;
}

int gv_dealloc_mw(uintptr_t h)
{
	struct gva_mw *mw = (struct gva_mw *)h;
	int rc;

	if (!mw)
		return EINVAL;
	rc = gva_simple(mw->d, GVA_DEALLOC_MW, mw->h);
	if (rc && !gva_usable(mw->d))
		return rc;
	free(mw);
	return 0;
}
