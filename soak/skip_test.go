//go:build !soak

package soak

import "testing"

const skipMsg = "soak tests are built only with -tags soak: run `make soak` (SOAK_DURATION, SOAK_KILL_ROUNDS tune it)"

func TestMixedLoad(t *testing.T) { t.Skip(skipMsg) }

func TestKillLoop(t *testing.T) { t.Skip(skipMsg) }

func TestResumeLoop(t *testing.T) { t.Skip(skipMsg) }
