/*
 * stack_mr: registered memory on the stack (capitest TestAttachStackRegistration).
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Registers a buffer on the caller's stack, again and again, and checks that the stack
 * survives: on the C flavour the registration moves the buffer's pages, which hold the
 * frames of the registration call itself, onto a memfd, and a write the call made
 * between the copy and the mapping was lost ("stack smashing detected" under
 * -fstack-protector-all, about one run of 300 registrations in three). */
static int reg_on_stack(struct ibv_pd *pd, int round)
{
	volatile unsigned long before[64];
	char buf[8192];
	volatile unsigned long after[64];
	for (int i = 0; i < 64; i++) before[i] = after[i] = 0x5a5a0000UL + i + round;
	memset(buf, round & 0xff, sizeof(buf));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr) { perror("ibv_reg_mr"); return 1; }
	for (int i = 0; i < 64; i++)
		if (before[i] != 0x5a5a0000UL + i + round || after[i] != 0x5a5a0000UL + i + round) {
			fprintf(stderr, "round %d: stack word %d lost\n", round, i); return 1; }
	for (size_t i = 0; i < sizeof(buf); i++)
		if (buf[i] != (char)(round & 0xff)) { fprintf(stderr, "round %d: buffer byte %zu lost\n", round, i); return 1; }
	if (ibv_dereg_mr(mr)) { perror("ibv_dereg_mr"); return 1; }
	return 0;
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1) { fprintf(stderr, "no device\n"); return 1; }
	struct ibv_context *c = ibv_open_device(l[0]);
	if (!c) { perror("open"); return 1; }
	struct ibv_pd *pd = ibv_alloc_pd(c);
	for (int r = 0; r < 300; r++)
		if (reg_on_stack(pd, r)) return 1;
	printf("ok\n");
	return 0;
}
