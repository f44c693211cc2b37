"""Text written for other programs to read: CSV cells that a spreadsheet opens (the cost review's and a
campaign's exports)."""

import re

# A spreadsheet runs a cell that begins with one of these as a formula (a job named "=1+2", or worse
# "=HYPERLINK(...)"); tab and carriage return are on OWASP's list too, as some spreadsheets skip them first.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
PLAIN_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")  # money as text ("-1.50") is a number, not a formula


def csv_text(value):
    """Return the string `value` as a spreadsheet's text cell: one that would start a formula gets a leading
    apostrophe (OWASP's CSV-injection guard); a plain number ("-1.50") and any other text come back unchanged.
    The apostrophe, not a tab, because spreadsheets read it as "this is text" and hide it, and any other
    reader sees plainly that a character was added, where a tab is invisible whitespace."""
    if value.startswith(FORMULA_STARTS) and not PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value
