# Loaded by the figure scripts: the caller's strings (titles, names, labels), read from
# strings.tsv as data, one "name<TAB>value" line each, so nothing in them is ever parsed as a
# command. STRINGS (their count) comes with the numbers. str('name') is a string's value.
if (STRINGS > 0) {
    set datafile separator "\t"
    set datafile commentschars ""
    array STR_NAME[STRINGS]
    array STR_VALUE[STRINGS]
    stats 'strings.tsv' using (STR_NAME[int($0) + 1] = strcol(1), STR_VALUE[int($0) + 1] = strcol(2), 0) nooutput
    set datafile separator whitespace
    set datafile commentschars "#"
}
str_at(name, i) = i > STRINGS ? "" : STR_NAME[i] eq name ? STR_VALUE[i] : str_at(name, i + 1)
str(name) = str_at(name, 1)
