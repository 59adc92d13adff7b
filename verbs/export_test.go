package verbs

// ChannelServes reports whether ch's waiters serve its device themselves (the
// provider's driver.Leader), for the tests of package verbs_test.
func ChannelServes(ch *CompChannel) bool { return ch.lead != nil }
