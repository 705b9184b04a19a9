"""Each chapter's helpers and readings: the code that runs a chapter's technique, checks its
numbers and turns its measured verdicts into the sentences and tables its page shows. One
module per chapter, tested on every branch; the pages call them and show their output."""
