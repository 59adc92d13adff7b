//go:build !linux

package server

import (
	"errors"
	"fmt"
)

// Server is a running daemon: Linux only (memfd, SCM_RIGHTS, eventfd).
type Server struct{}

// New fails: the daemon needs Linux.
func New(cfg Config) (*Server, error) {
	return nil, fmt.Errorf("goverbs serve needs Linux (memfd, SCM_RIGHTS, eventfd): %w", errors.ErrUnsupported)
}

// Close does nothing.
func (s *Server) Close() error { return nil }

// Sockets lists nothing.
func (s *Server) Sockets() []string { return nil }

// Clients is none.
func (s *Server) Clients() int { return 0 }
