"""English text normalization before phonemization: numbers, dates, times, money, units and
abbreviations spelled out as words, so the phonemizer reads them as a speaker would.

::

    normalize("Dr. Smith paid $3.50 for 2 kg on 2024-03-15 at 9:05.")
    # 'Doctor Smith paid three dollars and fifty cents for two kilograms on March fifteenth,
    #  twenty twenty-four at nine oh five.'

The rules run in a fixed order (dates before times before money before plain numbers) and
each rewrites only what its pattern matches; text they do not match passes through.
"""

from __future__ import annotations

import re

__all__ = ["normalize", "number_words", "ordinal_words", "year_words"]

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
         "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10 ** 12, "trillion"), (10 ** 9, "billion"), (10 ** 6, "million"),
           (1000, "thousand")]
_ORDINAL_ENDS = {"one": "first", "two": "second", "three": "third", "five": "fifth",
                 "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
# Numbers this long are read digit by digit (phone numbers, serials), not as quantities.
MAX_SPOKEN_DIGITS = 15

_ABBREVIATIONS = [
    (r"\bDr\.(?=\s+[A-Z])", "Doctor"), (r"\bMr\.", "Mister"), (r"\bMrs\.", "Missus"),
    (r"\bMs\.", "Miss"), (r"\bProf\.(?=\s+[A-Z])", "Professor"),
    (r"\bSt\.(?=\s+[A-Z])", "Saint"), (r"\bJr\.", "Junior"), (r"\bSr\.", "Senior"),
    (r"\be\.g\.", "for example"), (r"\bi\.e\.", "that is"), (r"\bvs\.?(?=\s)", "versus"),
    (r"\betc\.", "et cetera"), (r"\bapprox\.", "approximately"), (r"\bno\.(?=\s*\d)", "number"),
]
_UNITS = {
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter",
    "centimeters"), "mm": ("millimeter", "millimeters"), "kg": ("kilogram", "kilograms"),
    "g": ("gram", "grams"), "mg": ("milligram", "milligrams"), "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "in": ("inch", "inches"), "l": ("liter", "liters"), "ml": ("milliliter", "milliliters"),
    "h": ("hour", "hours"), "hr": ("hour", "hours"), "min": ("minute", "minutes"),
    "s": ("second", "seconds"), "ms": ("millisecond", "milliseconds"),
    "km/h": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour",
    "miles per hour"), "kb": ("kilobyte", "kilobytes"), "mb": ("megabyte", "megabytes"),
    "gb": ("gigabyte", "gigabytes"), "tb": ("terabyte", "terabytes"),
    "hz": ("hertz", "hertz"), "khz": ("kilohertz", "kilohertz"), "ghz": ("gigahertz",
    "gigahertz"), "°c": ("degree Celsius", "degrees Celsius"), "°f": ("degree Fahrenheit",
    "degrees Fahrenheit"), "%": ("percent", "percent"),
}


def number_words(n: int) -> str:
    """A non-negative integer in words: 342 -> 'three hundred forty-two'."""
    if n < 0:
        return "minus " + number_words(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("-" + _ONES[n % 10] if n % 10 else "")
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + (" " + number_words(rest) if rest else "")
    for scale, name in _SCALES:
        if n >= scale:
            head, rest = divmod(n, scale)
            return number_words(head) + " " + name + (" " + number_words(rest) if rest else "")
    raise AssertionError("unreachable")


def ordinal_words(n: int) -> str:
    """An ordinal in words: 21 -> 'twenty-first', 12 -> 'twelfth'."""
    words = number_words(n)
    head, sep, last = words.rpartition("-" if "-" in words.split(" ")[-1] else " ")
    if last in _ORDINAL_ENDS:
        last = _ORDINAL_ENDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + sep + last


def year_words(y: int) -> str:
    """A year as people say it: 1984 -> 'nineteen eighty-four', 2005 -> 'two thousand five',
    2024 -> 'twenty twenty-four', 1900 -> 'nineteen hundred'."""
    if y < 1000 or y >= 10000 or (2000 <= y < 2010):
        return number_words(y)
    head, tail = divmod(y, 100)
    if tail == 0:
        return number_words(head) + " hundred"
    if tail < 10:
        return number_words(head) + " oh " + number_words(tail)
    return number_words(head) + " " + number_words(tail)


def _digits(s: str) -> str:
    return " ".join(_ONES[int(c)] for c in s)


def _decimal(whole: str, frac: str) -> str:
    head = number_words(int(whole)) if whole else "zero"
    return f"{head} point {_digits(frac)}"


def _quantity(text: str) -> str:
    """A number token (commas allowed, optional decimals) in words."""
    text = text.replace(",", "")
    if "." in text:
        whole, frac = text.split(".", 1)
        return _decimal(whole, frac)
    if len(text) > MAX_SPOKEN_DIGITS:
        return _digits(text)
    return number_words(int(text))


def _date_iso(m: re.Match) -> str:
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return m.group(0)
    return f"{_MONTHS[mo - 1]} {ordinal_words(d)}, {year_words(y)}"


def _date_words(m: re.Match) -> str:
    month, day, year = m.group(1), int(m.group(2)), m.group(3)
    out = f"{month} {ordinal_words(day)}"
    return out + (f", {year_words(int(year))}" if year else "")


def _time(m: re.Match) -> str:
    h, mi = int(m.group(1)), int(m.group(2))
    suffix = m.group(3)
    if mi == 0:
        spoken = f"{number_words(h)} o'clock" if not suffix else number_words(h)
    elif mi < 10:
        spoken = f"{number_words(h)} oh {number_words(mi)}"
    else:
        spoken = f"{number_words(h)} {number_words(mi)}"
    if suffix:
        spoken += " " + " ".join(suffix.replace(".", "").upper())
    return spoken


def _money(m: re.Match) -> str:
    sign, amount, scale = m.group(1), m.group(2).replace(",", ""), m.group(3)
    unit, cent = {"$": ("dollar", "cent"), "£": ("pound", "penny"), "€": ("euro", "cent")}[sign]
    if scale:
        return f"{_quantity(amount)} {scale} {unit}s"
    whole, _, frac = amount.partition(".")
    n = int(whole) if whole else 0
    out = f"{number_words(n)} {unit}{'' if n == 1 else 's'}"
    if frac:
        c = int(frac[:2].ljust(2, "0"))
        if c:
            if c == 1:
                cents = cent
            else:
                cents = "pence" if cent == "penny" else cent + "s"
            out += f" and {number_words(c)} {cents}"
    return out


def _unit(m: re.Match) -> str:
    amount, unit = m.group(1), m.group(2)
    one, many = _UNITS[unit.lower()]
    return f"{_quantity(amount)} {one if amount == '1' else many}"


def _ordinal(m: re.Match) -> str:
    return ordinal_words(int(m.group(1)))


def _plain_number(m: re.Match) -> str:
    token = m.group(0)
    if re.fullmatch(r"\d{4}", token) and 1100 <= int(token) <= 2099:
        return year_words(int(token))   # a bare four-digit number in this range reads as a year
    return _quantity(token)


# Units that are also words or letters ("5 in the box", "plan b") count only when written
# against the number ("5in", "10s"); the others may stand after a space ("5 km").
_ATTACHED_ONLY = {"m", "s", "g", "h", "l", "in", "min", "ft", "mi", "hr", "ms", "mb", "lb"}


def _unit_pattern(units) -> str:
    return "|".join(sorted((re.escape(u) for u in units), key=len, reverse=True))


_UNITS_SPACED = _unit_pattern(u for u in _UNITS if u not in _ATTACHED_ONLY)
_UNITS_ATTACHED = _unit_pattern(_UNITS)


def normalize(text: str) -> str:
    """Spell out what a phonemizer would misread; whitespace collapsed, quotes straightened."""
    text = text.replace("\u2018", "'").replace("\u2019", "'").replace("\u201c", '"') \
        .replace("\u201d", '"')
    text = re.sub(r"\s+", " ", text).strip()
    for pattern, words in _ABBREVIATIONS:
        text = re.sub(pattern, words, text)
    text = re.sub(r"\b(\d{4})-(\d{2})-(\d{2})\b", _date_iso, text)
    months = "|".join(_MONTHS)
    text = re.sub(rf"\b({months}) (\d{{1,2}})(?:st|nd|rd|th)?\b(?:,? (\d{{4}})\b)?",
                  _date_words, text)
    text = re.sub(r"\b(\d{1,2}):([0-5]\d)\b(?:\s*([AaPp]\.?[Mm]\.?))?", _time, text)
    text = re.sub(r"([$£€])(\d[\d,]*(?:\.\d+)?)(?:\s+(thousand|million|billion|trillion))?",
                  _money, text)
    text = re.sub(rf"(\d[\d,]*(?:\.\d+)?)({_UNITS_ATTACHED})(?![A-Za-z])", _unit, text,
                  flags=re.IGNORECASE)
    text = re.sub(rf"(\d[\d,]*(?:\.\d+)?)\s+({_UNITS_SPACED})(?![A-Za-z])", _unit, text,
                  flags=re.IGNORECASE)
    text = re.sub(r"\b(\d+)(?:st|nd|rd|th)\b", _ordinal, text)
    text = re.sub(r"(?<=\d)\s*-\s*(?=\d)", " to ", text)          # ranges: 3-5 -> 3 to 5
    text = re.sub(r"\d[\d,]*(?:\.\d+)?|\.\d+", _plain_number, text)
    return text
