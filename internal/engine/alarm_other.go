//go:build !linux

package engine

import (
	"errors"
	"time"
)

// alarm is the doorbell's backstop timer, which needs Linux's timerfd (alarm_linux.go).
// Elsewhere there is none, and the doorbell wakes the sender goroutine instead (a
// busy-poll device needs a netio.Poller, which only Linux has today).
type alarm struct{}

func newAlarm() *alarm { return nil }

func (a *alarm) set(time.Duration) error { return errors.ErrUnsupported }
func (a *alarm) wait() error             { return errors.ErrUnsupported }
func (a *alarm) release()                {}

func alarmSets(*alarm) int64 { return 0 }
