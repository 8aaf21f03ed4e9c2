package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/tenant"
)

func newKeys() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Make API keys and their hashes for svc serve --api-keys",
		Long: `Make the API keys of svc serve --api-keys (docs/tenants.md). The key file
holds each key's SHA-256, never the key: "svc keys new" makes a key and
prints it with its hash, "svc keys hash" prints the hash of a key you have.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newKeysHash(), newKeysNew())
	return cmd
}

func newKeysHash() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "hash",
		Short: "Print the SHA-256 of an API key, for the key file",
		Long: `Print the SHA-256 (64 hex digits) of an API key, as the sha256 field of
the key file of svc serve --api-keys wants it. The key is read from
standard input (surrounding whitespace, such as the final newline, is
dropped), or given with --key (visible in ps and the shell's history:
prefer standard input).`,
		Example: `  svc keys hash --key sk-team-a-0123456789
  svc keys new | sed -n 's/^key: //p' | svc keys hash`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("key") {
				data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<10))
				if err != nil {
					return fmt.Errorf("reading the key from standard input: %w", err)
				}
				key = strings.TrimSpace(string(data))
			}
			switch {
			case key == "":
				return &exitError{code: 2, err: errors.New("no key: give it on standard input or with --key")}
			case strings.TrimSpace(key) != key:
				return &exitError{code: 2, err: errors.New("--key has leading or trailing whitespace, which HTTP drops from the header: remove it")}
			case strings.ContainsAny(key, " \t\r\n"):
				return &exitError{code: 2, err: errors.New("the key holds whitespace or spans several lines; a bearer token is one word")}
			}
			fmt.Fprintln(cmd.OutOrStdout(), tenant.Hash(key))
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the key to hash (default: read from standard input)")
	return cmd
}

func newKeysNew() *cobra.Command {
	return &cobra.Command{
		Use:   "new",
		Short: "Make a random API key and print it with its SHA-256",
		Long: `Make a random API key (32 bytes from the system's random source, as
"svc_" and URL-safe base64) and print two lines: "key: KEY", to hand to
whoever calls the server, and "sha256: HEX", for the key file of svc serve
--api-keys. The key is printed once and kept nowhere.`,
		Example: `  svc keys new`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return fmt.Errorf("random source: %w", err)
			}
			key := "svc_" + base64.RawURLEncoding.EncodeToString(b[:])
			fmt.Fprintf(cmd.OutOrStdout(), "key: %s\nsha256: %s\n", key, tenant.Hash(key))
			return nil
		},
	}
}
