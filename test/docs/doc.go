// Package docs provides checks of the repository's documentation: every
// relative link and #anchor in README.md, docs/*.md and pkg/idem/README.md
// names a file that exists and, for a Markdown file, a heading in it; and
// every one of those documents can be reached from README.md by its links.
// It reads files only: no emulator, no network.
package docs
