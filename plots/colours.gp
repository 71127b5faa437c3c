# Loaded by the figure scripts: one colour per attention type in every figure (standard blue,
# DIFF orange, DIFF V2 green; none of them yellow), told apart in greyscale too
attention_colour(a) = a == 0 ? 0x1f5fa8 : a == 1 ? 0xe07b00 : 0x2a9d3a
